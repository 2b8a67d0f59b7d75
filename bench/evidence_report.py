#!/usr/bin/env python3
"""Builds docs/results.md (and its PNGs, through `sao plot`) from the raw runs
that bench/evidence.sh leaves under OUT/<experiment>/<variant>/seed_<n>/.
Only the standard library: the machines reach no package index.

    bench/evidence_report.py OUT REPORT.md IMAGE_DIR
"""
import json
import math
import os
import platform
import statistics
import subprocess
import sys

PAPER = {
    "compare": "SAO beats GRPO (group baselines) on agentic and reasoning tasks at equal samples.",
    "ablations": "Each practical design (faster critic K>1, frozen critic attention, a learned critic, "
    "DIS instead of PPO clip) contributes; removing one lowers accuracy.",
    "stability": "SAO trains stably for 1,000+ steps where asynchronous GRPO can collapse.",
    "drift": "SAO adapts when the environment drifts (online learning).",
}
LABELS = {
    "sao": "SAO (async, 1 rollout/prompt, critic, DIS)",
    "grpo_sync": "GRPO G=8, synchronous",
    "grpo_async": "GRPO G=8, asynchronous",
    "ppo": "PPO with critic (clip)",
    "sao_k1": "SAO, K=1 (no faster critic)",
    "sao_unfrozen_critic": "SAO, critic attention trained",
    "sao_running_mean": "SAO, running-mean baseline (no critic)",
    "sao_ppo_clip": "SAO, PPO clip instead of DIS",
    "running_mean": "running-mean baseline",
    "grpo": "GRPO G=8, synchronous",
}


def read_run(directory):
    steps, evals, events = [], [], []
    with open(os.path.join(directory, "metrics.jsonl")) as handle:
        for line in handle:
            record = json.loads(line)
            if "event" in record:
                events.append(record)
            elif "eval" in record:
                evals.append(record)
            else:
                steps.append(record)
    wall = None
    wall_file = os.path.join(directory, "wall.json")
    if os.path.exists(wall_file):
        with open(wall_file) as handle:
            wall = json.load(handle)["wall_s"]
    return {"dir": directory, "steps": steps, "evals": evals, "wall": wall}


def experiments(out):
    found = {}
    for experiment in sorted(os.listdir(out)):
        path = os.path.join(out, experiment)
        if not os.path.isdir(path) or experiment.startswith("sft_"):
            continue
        for variant in sorted(os.listdir(path)):
            runs = []
            variant_path = os.path.join(path, variant)
            for seed in sorted(os.listdir(variant_path)):
                run_dir = os.path.join(variant_path, seed)
                if os.path.exists(os.path.join(run_dir, "summary.json")):
                    runs.append(read_run(run_dir))
            if runs:
                found.setdefault(experiment, {})[variant] = runs
    return found


def number(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def mean_spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-", None, None
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f} ± {spread:.3f}", mean, spread


def final_accuracy(run):
    return number(run["evals"][-1]["accuracy"]) if run["evals"] else None


def first_accuracy(run):
    return number(run["evals"][0]["accuracy"]) if run["evals"] else None


def totals(run):
    trajectories = sum(s.get("trajectories") or 0 for s in run["steps"])
    tokens = sum(s.get("tokens") or 0 for s in run["steps"])
    return trajectories, tokens


def plot(groups, out_png, axis, panels, smooth=10):
    arguments = ["./build/sao", "plot", "--x", axis, "--panels", panels, "--overview-only", "--smooth", str(smooth),
                 "--out", os.path.dirname(out_png), "--name", os.path.basename(out_png)]
    for label, runs in groups:
        arguments.append(label + "=" + ",".join(r["dir"] for r in runs))
    subprocess.run(arguments, check=True, stdout=subprocess.DEVNULL)


def comparison_table(variants, order):
    lines = ["| variant | seeds | held-out before | held-out final (mean ± sd) | trajectories | tokens | wall s (mean) |",
             "|---|---|---|---|---|---|---|"]
    means = {}
    for variant in order:
        if variant not in variants:
            continue
        runs = variants[variant]
        final_text, mean, spread = mean_spread([final_accuracy(r) for r in runs])
        first_text, _, _ = mean_spread([first_accuracy(r) for r in runs])
        trajectories = statistics.fmean(totals(r)[0] for r in runs)
        tokens = statistics.fmean(totals(r)[1] for r in runs)
        walls = [r["wall"] for r in runs if r["wall"] is not None]
        wall = f"{statistics.fmean(walls):.0f}" if walls else "-"
        lines.append(f"| {LABELS.get(variant, variant)} | {len(runs)} | {first_text} | {final_text} | "
                     f"{trajectories:.0f} | {tokens:.0f} | {wall} |")
        means[variant] = (mean, spread, len(runs))
    return lines, means


def verdict(means, a, b):
    if a not in means or b not in means or means[a][0] is None or means[b][0] is None:
        return f"{a} vs {b}: not measured"
    (ma, sa, na), (mb, sb, nb) = means[a], means[b]
    difference = ma - mb
    noise = max(sa, sb)
    if na < 2 or nb < 2:
        call = "one seed only, no spread to judge by"
    elif abs(difference) <= noise:
        call = "within one standard deviation: not distinguishable at this scale"
    else:
        call = f"{'higher' if difference > 0 else 'lower'} by more than one standard deviation"
    return f"{LABELS.get(a, a)} {ma:.3f} vs {LABELS.get(b, b)} {mb:.3f} (difference {difference:+.3f}): {call}"


def moving(values, window):
    out, recent = [], []
    for value in values:
        if value is not None:
            recent.append(value)
            recent = recent[-window:]
        out.append(statistics.fmean(recent) if recent else None)
    return out


def stability_rows(runs):
    rows = []
    for variant, run_list in runs.items():
        run = run_list[0]
        steps = run["steps"]
        if not steps:
            continue
        entropy = [number(s.get("entropy")) for s in steps]
        grad = [number(s.get("grad_norm")) for s in steps]
        reward = [number(s.get("reward_mean")) for s in steps]
        smoothed = moving(reward, 50)
        peak = max((v for v in smoothed if v is not None), default=None)
        collapse = None
        for index, value in enumerate(smoothed):
            if peak and value is not None and index > 50 and value < 0.5 * peak:
                collapse = steps[index]["step"]
                break
        ent = [e for e in entropy if e is not None]
        grads = [g for g in grad if g is not None]
        accuracies = ", ".join(f"{e['step']}: {e['accuracy']:.3f}" for e in run["evals"] if number(e["accuracy"]) is not None)
        rows.append((variant, len(steps), ent[:50], ent[-50:], grads, smoothed, collapse, accuracies))
    return rows


def drift_rows(runs):
    rows = []
    for variant, run_list in runs.items():
        for run in run_list:
            steps = run["steps"]
            regimes = [(s["step"], s.get("env_regime")) for s in steps if s.get("env_regime") is not None]
            switches = [regimes[i][0] for i in range(1, len(regimes)) if regimes[i][1] != regimes[i - 1][1]]
            reward = [number(s.get("reward_mean")) for s in steps]
            smoothed = moving(reward, 10)
            by_step = {s["step"]: i for i, s in enumerate(steps)}
            for number_of_switch, switch in enumerate(switches):
                index = by_step[switch]
                # Recovery counts only inside this regime (before the next switch).
                end = by_step[switches[number_of_switch + 1]] if number_of_switch + 1 < len(switches) else len(steps)
                before = [r for r in reward[max(0, index - 10):index] if r is not None]
                after = [r for r in reward[index:index + 10] if r is not None]
                if not before:
                    continue
                target = 0.9 * statistics.fmean(before)
                recovered = None
                for j in range(index, end):
                    if smoothed[j] is not None and smoothed[j] >= target and j >= index + 10:
                        recovered = steps[j]["step"] - switch
                        break
                rows.append((variant, os.path.basename(run["dir"]), switch, statistics.fmean(before),
                             statistics.fmean(after) if after else float("nan"), recovered))
    return rows


def hardware():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    blas = "unknown"
    try:
        doctor = subprocess.run(["./build/sao", "doctor"], capture_output=True, text=True, timeout=120).stdout
        for line in doctor.splitlines():
            if "blas" in line.lower() or "matmul" in line:
                text = " ".join(line.split())
                blas = text if blas == "unknown" else blas + "; " + text
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}; {blas}"


def main():
    out, report, images = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(images, exist_ok=True)
    found = experiments(out)
    md = ["# Results: the paper's claims at small scale", "",
          "Generated by `bench/evidence.sh` (runs) and `bench/evidence_report.py` (this page) from the raw",
          f"`metrics.jsonl` of every run under `{out}/`; rebuild it without rerunning with",
          "`bench/evidence.sh --report-only`. Rerun a part with `bench/evidence.sh --only compare|ablations|stability|drift`.",
          "", f"Hardware: {hardware()}.", "",
          "Scale: a 0.77M-parameter model, byte tokenizer, tasks built into the runtime (`arithmetic`, the agentic",
          "`maze`, the drifting `drift`), warm-started by SFT once per task and shared by all runs of that task;",
          "every run's seed (`run.seed`) changes sampling. Wall times were measured on a shared 2-core machine",
          "while other work ran: compare them within a table, not with other machines.", ""]
    missing = [name for name in ("arith", "maze", "stability", "drift") if name not in found]
    if missing:
        md += [f"Not run yet (no finished runs under `{out}/`): {', '.join(missing)}.", ""]

    for task, title in (("arith", "arithmetic (reasoning)"), ("maze", "maze (agentic, multi-turn)")):
        if task not in found:
            continue
        variants = found[task]
        order = ["sao", "grpo_sync", "grpo_async", "ppo"]
        if not any(v in variants for v in order):
            continue
        md += [f"## SAO vs GRPO vs PPO: {title}", "", f"Paper: {PAPER['compare']}", "",
               "Every algorithm trains on 64 trajectories per update (SAO 64 x 1, GRPO 8 prompts x 8) for the same",
               "number of updates, so trajectories and generated tokens are matched.", ""]
        table, means = comparison_table(variants, order)
        md += table + [""]
        for other in ("grpo_sync", "grpo_async", "ppo"):
            md.append("- " + verdict(means, "sao", other))
        md.append("")
        groups = [(v, variants[v]) for v in order if v in variants]
        for axis in ("trajectories", "tokens", "wall_time_s"):
            png = os.path.join(images, f"{task}_compare_{axis}.png")
            plot(groups, png, axis, "accuracy,reward")
            md += [f"![{task} held-out accuracy and reward vs {axis}]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "arith" in found and any(v.startswith("sao_") for v in found["arith"]):
        variants = found["arith"]
        order = ["sao", "sao_k1", "sao_unfrozen_critic", "sao_running_mean", "sao_ppo_clip"]
        md += ["## Ablations (arithmetic)", "", f"Paper: {PAPER['ablations']}", ""]
        table, means = comparison_table(variants, order)
        md += table + [""]
        for other in order[1:]:
            md.append("- " + verdict(means, "sao", other))
        md.append("")
        png = os.path.join(images, "arith_ablations.png")
        plot([(v, variants[v]) for v in order if v in variants], png, "trajectories", "accuracy,reward")
        md += [f"![ablations]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "stability" in found:
        md += ["## Stability: 1,000 learner steps on the maze", "", f"Paper: {PAPER['stability']}", "",
               "| variant | steps | entropy, first 50 steps | entropy, last 50 | grad norm max | reward (50-step mean) start -> end | collapse (reward < half its peak) | held-out by step |",
               "|---|---|---|---|---|---|---|---|"]
        for variant, count, ent_first, ent_last, grads, smoothed, collapse, accuracies in stability_rows(found["stability"]):
            valid = [v for v in smoothed if v is not None]
            md.append(f"| {LABELS.get(variant, variant)} | {count} | {statistics.fmean(ent_first):.3f} | "
                      f"{statistics.fmean(ent_last):.3f} | {max(grads):.2f} | {valid[50 if len(valid) > 50 else 0]:.3f} -> {valid[-1]:.3f} | "
                      f"{'none' if collapse is None else 'at step ' + str(collapse)} | {accuracies} |")
        md.append("")
        png = os.path.join(images, "stability.png")
        plot([(v, r) for v, r in found["stability"].items()], png, "step", "reward,accuracy,staleness,dis_rejection", 25)
        md += [f"![stability]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "drift" in found:
        md += ["## Online learning: the drifting environment", "", f"Paper: {PAPER['drift']}", "",
               "The answer style switches every 50 learner steps (plain, then reversed digits, then plain).",
               "Reward is the mean over the 10 steps before and after each switch; recovery is the number of steps",
               "until the 10-step mean is back to 90% of its level before the switch (- = not within the run).", "",
               "| variant | seed | switch at step | reward before | reward after | recovery steps |", "|---|---|---|---|---|---|"]
        for variant, seed, switch, before, after, recovered in drift_rows(found["drift"]):
            md.append(f"| {LABELS.get(variant, variant)} | {seed} | {switch} | {before:.3f} | {after:.3f} | "
                      f"{'-' if recovered is None else recovered} |")
        md.append("")
        png = os.path.join(images, "drift.png")
        plot([(v, r) for v, r in found["drift"].items()], png, "step", "reward", 5)
        md += [f"![drift]({os.path.relpath(png, os.path.dirname(report))})", ""]

    with open(report, "w") as handle:
        handle.write("\n".join(md) + "\n")
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
