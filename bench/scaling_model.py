#!/usr/bin/env python3
"""A throughput model for one learner and N rollout processes, fitted to the
per-component costs that one run measured (its summary.json time
accounting), and checked against the measured throughput of every run.

    bench/scaling_model.py CORES CALIBRATION_RUN_DIR MEASURED...   (MEASURED: N:RUN_DIR:TRAJ_PER_S)

Costs, per trained trajectory, from the calibration run (N = 1):
  l   learner thread: model maths + weight serialisation (learner actor's work CPU)
  lo  the rest of the learner process (runtime: messaging, deserialising
      trajectories, metrics; its local env if any)
  r   a whole rollout process (decode, env, weights, runtime)
  rd  the rollout actor's decode thread alone
Bounds on trajectories/s with N rollout processes on C cores:
  learner    1 / l          the learner is one thread
  rollouts   N / rd         each rollout decodes on one thread
  cpu        C / (l + lo + r)  every trajectory costs l + lo + r CPU seconds
Prediction = the smallest bound. The learner saturates (adding rollout
processes stops helping) once N / rd reaches 1 / l, provided the cores can
feed it: C >= (l + lo + r) / l CPU-seconds per second; otherwise the cpu bound
decides first. All costs are CPU seconds of one run; a learner step's cost
per trajectory falls as its batch grows, so the fit holds near the batch sizes
of the calibration run.
"""
import json
import math
import os
import sys


def load(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as handle:
        accounting = json.load(handle)["time_accounting"]
    trajectories = 0
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        for line in handle:
            record = json.loads(line)
            if "event" not in record and "eval" not in record:
                trajectories += record.get("trajectories") or 0
    return accounting, trajectories


def costs(accounting, trajectories):
    learner = next(a for a in accounting["actors"] if a["kind"] == "learner")
    learner_node = learner["node"]
    learner_work = sum(w["cpu_s"] for bucket, w in learner["work"].items() if bucket in ("model", "weights"))
    nodes = accounting["nodes"]
    learner_process = nodes[learner_node]["process_cpu_s"]
    rollout_nodes = [n for n in nodes if n != learner_node]
    rollouts = [a for a in accounting["actors"] if a["kind"] == "rollout"]
    decode = sum(a["work"].get("model", {}).get("cpu_s", 0.0) for a in rollouts)
    if rollout_nodes:
        rollout_process = sum(nodes[n]["process_cpu_s"] for n in rollout_nodes)
    else:  # single process: the rollout's share is its own work; the rest is counted in lo
        rollout_process = decode + sum(a["work"].get("weights", {}).get("cpu_s", 0.0) for a in rollouts)
        learner_process -= rollout_process
    return {
        "l": learner_work / trajectories,
        "lo": (learner_process - learner_work) / trajectories,
        "r": rollout_process / trajectories,
        "rd": decode / trajectories,
    }


def bounds(c, cores, n):
    return {
        "learner": 1.0 / c["l"],
        "rollouts": n / c["rd"],
        "cpu": cores / (c["l"] + c["lo"] + c["r"]),
    }


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        sys.exit(2)
    cores = float(sys.argv[1])
    c = costs(*load(sys.argv[2]))
    print(f"calibration ({sys.argv[2]}), CPU ms per trained trajectory: learner thread l {1e3 * c['l']:.3f}, "
          f"rest of learner process lo {1e3 * c['lo']:.3f}, rollout process r {1e3 * c['r']:.3f} "
          f"(decode thread rd {1e3 * c['rd']:.3f})")
    print(f"{'processes':>9} {'learner':>9} {'rollouts':>9} {'cpu':>9} {'predicted':>10} {'bound':>9} "
          f"{'measured':>9} {'meas/pred':>9} {'run CPU ms/traj':>16}")
    for item in sys.argv[3:]:
        n_text, run_dir, measured_text = item.split(":")
        n, measured = int(n_text), float(measured_text)
        b = bounds(c, cores, n)
        bound = min(b, key=b.get)
        accounting, trajectories = load(run_dir)
        run_cpu = sum(node["process_cpu_s"] for node in accounting["nodes"].values()) / trajectories
        print(f"{n:>9} {b['learner']:>9.1f} {b['rollouts']:>9.1f} {b['cpu']:>9.1f} {b[bound]:>10.1f} {bound:>9} "
              f"{measured:>9.1f} {measured / b[bound]:>9.3f} {1e3 * run_cpu:>16.3f}")
    learner_limit = 1.0 / c["l"]
    saturating = math.ceil(learner_limit * c["rd"])
    cores_needed = learner_limit * (c["l"] + c["lo"] + c["r"])
    print(f"The learner saturates at {learner_limit:.1f} trajectories/s: {saturating} rollout process(es) decode that "
          f"fast, and the cores must cover {cores_needed:.2f} CPU-seconds per second (here {cores:.0f} cores: "
          f"{'enough' if cores >= cores_needed else 'not enough, so the CPU bound decides'}).")


if __name__ == "__main__":
    main()
