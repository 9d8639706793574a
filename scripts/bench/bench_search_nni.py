"""NNI 3.0 peer for scripts/bench/bench-search: time for NNI's NetworkMorphismTuner to generate one
new architecture (BayesOptimizer.generate through tuner.generate) from trained histories of
10, 50 and 200 models on a CIFAR-shaped task, with the work it did (annealing steps,
expansions, neighbours, acquisitions, edit distances), counted by wrapping NNI's own
functions. Histories are random walks of NNI's transform() from its default CNN, with
synthetic accuracies. Also times hyperopt's tpe.suggest at 100 observations.
Prints one JSON object per measurement."""

import json
import os
import random
import sys
import tempfile
import time
from queue import PriorityQueue

import numpy as np

import nni.algorithms.hpo.networkmorphism_tuner.bayesian as bayesian
import nni.algorithms.hpo.networkmorphism_tuner.graph_transformer as graph_transformer
from nni.algorithms.hpo.networkmorphism_tuner.graph import graph_to_json
from nni.algorithms.hpo.networkmorphism_tuner.networkmorphism_tuner import NetworkMorphismTuner

COUNTS = {"distances": 0, "pops": 0, "transforms": 0, "neighbours": 0, "acquisitions": 0}

_edit_distance = bayesian.edit_distance


def counting_edit_distance(x, y):
    COUNTS["distances"] += 1
    return _edit_distance(x, y)


class CountingQueue(PriorityQueue):
    def get(self, *a, **k):
        COUNTS["pops"] += 1
        return super().get(*a, **k)


_transform = bayesian.transform


def counting_transform(graph):
    COUNTS["transforms"] += 1
    out = _transform(graph)
    COUNTS["neighbours"] += len(out)
    return out


_acq = bayesian.BayesianOptimizer.acq


def counting_acq(self, graph):
    COUNTS["acquisitions"] += 1
    return _acq(self, graph)


bayesian.edit_distance = counting_edit_distance
bayesian.PriorityQueue = CountingQueue
bayesian.transform = counting_transform
bayesian.BayesianOptimizer.acq = counting_acq


def score(desc, rng):
    return 0.6 + 0.004 * len(desc.layers) + 0.01 * len(desc.skip_connections) + rng.uniform(-0.003, 0.003)


def history_tuner(n, seed):
    random.seed(seed)
    rng = random.Random(seed)
    tuner = NetworkMorphismTuner(task="cv", input_width=32, input_channel=3, n_output_node=10,
                                 optimize_mode="maximize", path=tempfile.mkdtemp(), verbose=False)
    start = tuner.generator_list[0](tuner.n_classes, tuner.input_shape).generate(
        tuner.default_model_len, tuner.default_model_width) if hasattr(tuner, "generator_list") else \
        tuner.generators[0](tuner.n_classes, tuner.input_shape).generate(tuner.default_model_len, tuner.default_model_width)
    descs, g, parent = [], start, -1
    while len(descs) < n:
        d = g.extract_descriptor()
        if not any(_edit_distance(d, x) < 1e-5 for x in descs):
            model_id = len(descs)
            graph_to_json(g, os.path.join(tuner.path, f"{model_id}.json"))
            tuner.model_count = model_id + 1
            tuner.descriptors.append(d)
            metric = score(d, rng)
            tuner.add_model(metric, model_id)
            tuner.update(parent, g, metric, model_id)
            descs.append(d)
            parent = model_id
        neighbours = _transform(g)
        if neighbours and rng.random() < 0.85:
            g = rng.choice(neighbours)
        else:
            g, parent = start, 0
    return tuner, descs


def main():
    sizes = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "10,50,200").split(",")]
    for n in sizes:
        tuner, descs = history_tuner(n, 2020)
        for k in COUNTS:
            COUNTS[k] = 0
        t = time.perf_counter()
        father, graph = tuner.generate()
        dt = time.perf_counter() - t
        mean_layers = sum(len(d.layers) for d in descs) / len(descs)
        print(json.dumps({"impl": "nni", "what": "generate", "history": n, "threads": 1,
                          "mean_chain_layers": round(mean_layers, 1), "seconds": dt,
                          "annealing_steps": COUNTS["pops"], "expansions": COUNTS["transforms"],
                          "neighbours": COUNTS["neighbours"], "acquisitions": COUNTS["acquisitions"],
                          "distances": COUNTS["distances"]}), flush=True)

    from hyperopt import STATUS_OK, Trials, fmin, hp, rand, tpe
    from hyperopt.base import Domain
    space = {"batch_size": hp.uniformint("batch_size", 16, 128), "kernel_size": hp.choice("kernel_size", [3, 5, 7])}

    def objective(p):
        return {"loss": ((p["batch_size"] + 7) % 97) / 97.0, "status": STATUS_OK}

    trials = Trials()
    fmin(objective, space, algo=rand.suggest, max_evals=100, trials=trials,
         rstate=np.random.default_rng(0), show_progressbar=False)
    domain = Domain(objective, space)
    times = []
    for i in range(20):
        ids = trials.new_trial_ids(1)
        t = time.perf_counter()
        tpe.suggest(ids, domain, trials, seed=i)
        times.append(time.perf_counter() - t)
    print(json.dumps({"impl": "hyperopt", "what": "tpe_suggest", "observations": 100,
                      "seconds": float(np.median(times))}), flush=True)


if __name__ == "__main__":
    main()
