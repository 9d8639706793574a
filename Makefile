# aiperf — `make run` and `make test` do all set-up on a fresh Debian machine (see README.md).
SHELL := /bin/bash

.PHONY: all setup setup-test build data run test image lint bench-data bench-ops bench-search bench-score bench-audit-power bench-train bench-run-pairs bench-auto bench-comm bench-primary weak-scaling gpu-bundle gpu-rehearse score-static docs-figures test-reframe clean

all: build

# What building and running need (OpenMPI, HDF5, libtorch — CUDA on a node with GPUs —, the dataset).
setup:
	scripts/dev/setup

# What only the tests need besides (SLURM, munge, the virtual cluster's tools, Chromium, patchelf).
setup-test:
	scripts/dev/setup-test

build: setup
	scripts/dev/cargo build --release --workspace

data: build
	scripts/tools/prepare-data

run: data
	scripts/tools/run

# The container images aiperf:cpu and aiperf:cuda (container/Dockerfile), from Debian's
# packages where no registry is reachable; IMAGES="cpu" builds one.
image: setup
	container/build

test: build setup-test
	scripts/dev/test

lint: setup
	scripts/dev/cargo fmt --all --check
	scripts/dev/cargo clippy --release --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" scripts/dev/cargo doc --release --workspace --no-deps

bench-data: data
	scripts/bench/bench-data

bench-ops: build
	scripts/bench/bench-ops

clean:
	cargo clean

bench-search: build
	scripts/bench/bench-search

bench-score: setup
	scripts/bench/bench-score

# The statistical audit's power against its cost, from one generous audit: RUN=results/<run>.
bench-audit-power: setup
	scripts/bench/bench-audit-power $(RUN)

bench-train: data
	scripts/bench/bench-train

# `make run`'s preset before and after (default: fp32 NCHW against the preset's auto), interleaved pairs.
bench-run-pairs: data
	scripts/bench/bench-run-pairs

# `auto` precision and memory format against every fixed choice on `make run`'s preset, interleaved rounds.
bench-auto: data
	scripts/bench/bench-auto

bench-comm: build
	scripts/bench/bench-comm

bench-primary: build
	scripts/bench/bench-primary

weak-scaling: build setup-test
	scripts/tools/weak-scaling

# aiperf-score as one static executable for reviewers (HDF5 built in; no runtime libraries).
# Needs only Rust, a C compiler and python3: not the set-up of `make setup`.
score-static:
	scripts/dev/build-static-score

# The ReFrame check on this machine (root): mpirun and a private SLURM, figures against the scorer.
test-reframe: build setup-test
	scripts/dev/test-reframe

# The docs' pictures, redrawn from the committed record set (docs/img/).
docs-figures: build
	scripts/dev/docs-figures

gpu-bundle: setup setup-test
	scripts/tools/gpu-bundle

gpu-rehearse: gpu-bundle
	scripts/tools/gpu-rehearse
