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

    bench/scaling_model.py latency OUT [SIGMA]   (OUT: a bench/async_latency.sh directory)

The latency term. Every run MODE_nN_lL of OUT with L > 0 is predicted from
the run of the same mode and N at L = 0 (its calibration: wall seconds per
learner step T0, the rollouts' decode CPU seconds per trajectory rd, and its
trajectories/s R0), with env latency drawn as env.latency draws it
(lognormal of mean L, SIGMA (default 1), capped at 20 L). Each rollout actor
holds E = 64 / N slots (rollout.slots); a slot plays its episode (a reset,
the reply, a step) and takes the next prompt at once (continuous batching):
  sync   a round is every slot's episode at one weight version, so a learner
         step waits for the slowest of the N E episodes:
         T = T0 + E[max over the N E episodes of (reset + step)]
         trajectories/s = N E / T   (a synchronous step trains one round)
  async  the slots never wait for each other; each cycles through reset and
         step latency while the actor's decode thread serves them all, and
         the latency-0 rate R0 (CPU-bound) stays a ceiling:
         trajectories/s = min(R0, N / rd, N E / E[reset + step])
The expectations are Monte-Carlo means of 20,000 draws.

    bench/scaling_model.py ranks [TOKENS_PER_STEP] [ACHIEVED_TFLOPS] [BUS_GB_PER_S]

The all-reduce term: data-parallel learner ranks (learner.ranks). A SAO step
with K critic updates costs (2 + 6 K + 2 + 6) P T FLOPs for P parameters a
model and T tokens (critic snapshot and fresh forwards, K critic
forward+backward, one actor forward+backward); N ranks split it, and each of
the K + 1 optimiser steps first all-reduces one model's fp32 gradients
(4 P bytes), a ring moving 2 (N - 1) / N of them over each rank's link:
  step(N) = 22 P T / (N F) + (K + 1) (2 (N - 1) / N) 4 P / B + (K + 1) 2 (N - 1) a
with F the FLOP rate a rank achieves, B the bus bandwidth, a ~20 us a hop.
Prints the step time, the all-reduce share and the speed-up over one rank
for 1..8 ranks, for the 135M and 1.5B shapes (defaults: 65,536 tokens a
step, 300 TFLOP/s achieved, NCCL at 100 GB/s).
"""
import json
import math
import os
import random
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


def latency_draws(mean_ms, sigma, count, rng):
    """Seconds, as src/env/latency.cpp draws them: lognormal with mean mean_ms, capped at 20 x mean."""
    mu = math.log(mean_ms) - 0.5 * sigma * sigma
    return [min(math.exp(mu + sigma * rng.gauss(0.0, 1.0)), 20.0 * mean_ms) / 1e3 for _ in range(count)]


def episode_wait(mean_ms, sigma, rng):
    """One episode's env wait: its reset and its step."""
    return sum(latency_draws(mean_ms, sigma, 2, rng))


def round_wait(mean_ms, sigma, episodes, rng):
    """A synchronous round's env wait: the slowest of its episodes, each a reset and a step."""
    return max(episode_wait(mean_ms, sigma, rng) for _ in range(episodes))


def expected(sample, draws=20000):
    return sum(sample() for _ in range(draws)) / draws


def run_rates(run_dir):
    """(trajectories/s, wall seconds per learner step) from the end of the first step to the end of the last."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        steps = [json.loads(line) for line in handle]
    steps = [s for s in steps if "trajectories" in s and "wall_time_s" in s]
    wall = steps[-1]["wall_time_s"] - steps[0]["wall_time_s"]
    return sum(s["trajectories"] for s in steps[1:]) / wall, wall / (len(steps) - 1)


def decode_seconds_per_trajectory(run_dir):
    accounting, trajectories = load(run_dir)
    rollouts = [a for a in accounting["actors"] if a["kind"] == "rollout"]
    return sum(a["work"].get("model", {}).get("cpu_s", 0.0) for a in rollouts) / trajectories


def latency_main(out, sigma):
    runs = {}
    for name in os.listdir(out):
        if "_n" not in name or not os.path.isfile(os.path.join(out, name, "summary.json")):
            continue
        mode, rest = name.rsplit("_n", 1)
        n, latency = (int(x) for x in rest.split("_l"))
        runs[(mode, n, latency)] = os.path.join(out, name)
    rng = random.Random(1)
    print(f"{'mode':>10} {'actors':>6} {'latency ms':>10} {'predicted traj/s':>16} {'measured':>9} {'meas/pred':>9}")
    for (mode, n, latency), run_dir in sorted(runs.items()):
        measured, _ = run_rates(run_dir)
        calibration = runs.get((mode, n, 0))
        if latency == 0 or calibration is None:
            print(f"{mode:>10} {n:>6} {latency:>10} {'(calibration)':>16} {measured:>9.1f} {'':>9}")
            continue
        rate0, step0 = run_rates(calibration)
        episodes = max(64 // n, 8 if mode == "grpo_sync" else 1)
        if mode.endswith("_sync"):
            wait = expected(lambda: round_wait(latency, sigma, n * episodes, rng), 4000)
            predicted = n * episodes / (step0 + wait)  # a sync step takes one round: N E trajectories
        else:
            decode = decode_seconds_per_trajectory(calibration)
            wait = expected(lambda: episode_wait(latency, sigma, rng))
            predicted = min(rate0, n / decode, n * episodes / wait)
        print(f"{mode:>10} {n:>6} {latency:>10} {predicted:>16.1f} {measured:>9.1f} {measured / predicted:>9.2f}")


def ranks_main(tokens, tflops, bus_gbps):
    critic_updates = 2
    hop_seconds = 20e-6
    print(f"learner ranks, {tokens:,} tokens a step, {tflops:g} TFLOP/s achieved a rank, all-reduce bus "
          f"{bus_gbps:g} GB/s, K = {critic_updates} critic updates")
    print(f"{'model':>6} {'ranks':>5} {'compute s':>10} {'allreduce s':>12} {'step s':>8} {'share':>7} {'speed-up':>9}")
    for name, params in (("135M", 134.5e6), ("1.5B", 1.54e9)):
        single = None
        for ranks in (1, 2, 4, 8):
            compute = (2 + 6 * critic_updates + 2 + 6) * params * tokens / (ranks * tflops * 1e12)
            reduces = critic_updates + 1
            allreduce = 0.0 if ranks == 1 else reduces * (
                2 * (ranks - 1) / ranks * 4 * params / (bus_gbps * 1e9) + 2 * (ranks - 1) * hop_seconds)
            step = compute + allreduce
            single = single or step
            print(f"{name:>6} {ranks:>5} {compute:>10.3f} {allreduce:>12.4f} {step:>8.3f} "
                  f"{allreduce / step:>7.1%} {single / step:>8.2f}x")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "ranks":
        args = [float(a) for a in sys.argv[2:5]]
        ranks_main(int(args[0]) if len(args) > 0 else 65536, args[1] if len(args) > 1 else 300.0,
                   args[2] if len(args) > 2 else 100.0)
        return
    if len(sys.argv) >= 3 and sys.argv[1] == "latency":
        latency_main(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1.0)
        return
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
