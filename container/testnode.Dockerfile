# The test cluster's node image: aiperf's cpu image plus munge and the SLURM daemons, so
# that `make test` runs a SLURM controller and one slurmd per host inside the containers (a
# centre runs SLURM on its hosts, not in aiperf's image; this image exists only for tests).
# Built by container/build (IMAGES=testnode) from the same context as the product images.
ARG FROM_IMAGE=aiperf:cpu
FROM ${FROM_IMAGE}
USER root
COPY packages install-packages /tmp/aiperf-build/
COPY debs/testnode/ /tmp/aiperf-build/debs/
RUN bash /tmp/aiperf-build/install-packages TESTNODE /tmp/aiperf-build/debs \
    && rm -rf /tmp/aiperf-build
USER aiperf
