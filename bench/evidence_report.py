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
VARIANT_ORDER = ["sao", "grpo_sync", "grpo_async", "ppo", "running_mean", "grpo"]


def read_run(directory):
    steps, evals, events = [], [], []
    with open(os.path.join(directory, "metrics.jsonl")) as handle:
        for line in handle:
            record = json.loads(line)
            if "event" in record:
                events.append(record)
            elif "eval" in record:
                # Runs before the keys were named apart call it "accuracy".
                if "heldout_accuracy" not in record and "accuracy" in record:
                    record["heldout_accuracy"] = record.pop("accuracy")
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
        if not os.path.isdir(path) or experiment.startswith("sft_") or experiment == "bench":
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


# Two-sided 95% quantiles of Student's t by degrees of freedom (a table, as
# the report uses only the standard library); between entries the smaller df
# is used, which widens the interval.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


def t975(df):
    keys = [k for k in T975 if k <= df]
    return T975[max(keys)] if keys else float("inf")


def mean_ci(values):
    """'mean [low, high]' with the 95% t-interval over seeds, the mean, and the half-width."""
    values = [v for v in values if v is not None]
    if not values:
        return "-", None, None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.3f} (1 seed)", mean, None
    half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]", mean, half


def welch(a_values, b_values):
    """Difference of means a - b and the half-width of its 95% Welch interval
    (None with fewer than two seeds on a side). Separated = the interval
    excludes 0."""
    a = [v for v in a_values if v is not None]
    b = [v for v in b_values if v is not None]
    if len(a) < 2 or len(b) < 2:
        return (statistics.fmean(a) - statistics.fmean(b) if a and b else None), None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    difference = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0:
        return difference, 0.0
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return difference, t975(math.floor(df)) * math.sqrt(va + vb)


def welch_text(a_values, b_values):
    difference, half = welch(a_values, b_values)
    if difference is None:
        return "not measured"
    if half is None:
        return f"{difference:+.3f} (fewer than 2 seeds on a side: not judged)"
    call = "separated" if abs(difference) > half else "not separated"
    return f"{difference:+.3f} ± {half:.3f} (95% CI of the difference): {call}"


def final_accuracy(run):
    return number(run["evals"][-1]["heldout_accuracy"]) if run["evals"] else None


def first_accuracy(run):
    return number(run["evals"][0]["heldout_accuracy"]) if run["evals"] else None


def accuracy_at_step(run, step):
    values = [number(e["heldout_accuracy"]) for e in run["evals"] if e.get("step") == step]
    return values[0] if values else None


def mid_step(variants):
    """The evaluation step nearest a third of the way through the shortest
    run: where the variants are still learning, before a task's ceiling
    (the final column) hides how fast each got there. Fixed by rule, not
    picked per table, so it cannot be chosen to favour a variant."""
    runs = [r for runs in variants.values() for r in runs if r["evals"]]
    if not runs:
        return None
    last = min(max(e.get("step", 0) for e in r["evals"]) for r in runs)
    steps = sorted({e.get("step") for r in runs for e in r["evals"] if 0 < e.get("step", 0) < last})
    steps = [s for s in steps if all(accuracy_at_step(r, s) is not None for r in runs)]
    return min(steps, key=lambda s: abs(s - last / 3)) if steps else None


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


def late_reward(run):
    """Mean training reward over the last 10% of a run's updates (at least one)."""
    rewards = [number(s.get("reward_mean")) for s in run["steps"]]
    rewards = [r for r in rewards if r is not None]
    if not rewards:
        return None
    tail = rewards[-max(1, len(rewards) // 10):]
    return statistics.fmean(tail)


def accuracy_at_wall(run, seconds):
    """Held-out accuracy at `seconds` of wall time: linear between the two
    evaluations around it (the last one when the run ended earlier)."""
    points = [(e["wall_time_s"], number(e["heldout_accuracy"])) for e in run["evals"]
              if number(e.get("wall_time_s")) is not None and number(e["heldout_accuracy"]) is not None]
    if not points:
        return None
    if seconds <= points[0][0]:
        return points[0][1]
    for (t0, a0), (t1, a1) in zip(points, points[1:]):
        if t0 <= seconds <= t1:
            return a0 if t1 == t0 else a0 + (a1 - a0) * (seconds - t0) / (t1 - t0)
    return points[-1][1]


def run_wall(run):
    """A run's training wall time: its last evaluation's clock (set-up excluded)."""
    times = [number(e.get("wall_time_s")) for e in run["evals"]]
    times = [t for t in times if t is not None]
    return times[-1] if times else None


def comparison_table(variants, order):
    """Rows of held-out accuracy at mid_step (equal trajectories, before the
    ceiling), final (equal trajectories) and at the shortest variant's wall
    time (equal wall time), each a mean with its 95% t-interval over seeds.
    Returns the lines, the per-seed finals, the per-seed equal-wall values,
    that wall time, and the per-seed mid-run values with their step (empty
    and None when no evaluation step lies before the end)."""
    present = [v for v in order if v in variants]
    walls = [statistics.fmean(w for w in (run_wall(r) for r in variants[v]) if w is not None) for v in present
             if any(run_wall(r) is not None for r in variants[v])]
    equal_wall = min(walls) if walls else None
    wall_head = f"held-out at {equal_wall:.0f} s (equal wall time)" if equal_wall else "held-out at equal wall time"
    middle = mid_step({v: variants[v] for v in present})
    mid_head = f" held-out at step {middle} (a third of the way, equal trajectories) |" if middle else ""
    lines = [f"| variant | seeds | held-out before |{mid_head} held-out final (equal trajectories), mean [95% CI] | "
             f"{wall_head} | training reward, last 10% of updates | trajectories | tokens | wall s (mean) |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if middle else "")]
    finals, at_wall, at_mid = {}, {}, {}
    for variant in present:
        runs = variants[variant]
        finals[variant] = [final_accuracy(r) for r in runs]
        if middle:
            at_mid[variant] = [accuracy_at_step(r, middle) for r in runs]
        at_wall[variant] = [accuracy_at_wall(r, equal_wall) for r in runs] if equal_wall else []
        firsts = [a for a in (first_accuracy(r) for r in runs) if a is not None]
        first_text = f"{statistics.fmean(firsts):.3f}" if firsts else "-"
        trajectories = statistics.fmean(totals(r)[0] for r in runs)
        tokens = statistics.fmean(totals(r)[1] for r in runs)
        wall_values = [r["wall"] for r in runs if r["wall"] is not None]
        wall = f"{statistics.fmean(wall_values):.0f}" if wall_values else "-"
        mid_text = f" {mean_ci(at_mid[variant])[0]} |" if middle else ""
        lines.append(f"| {LABELS.get(variant, variant)} | {len(runs)} | {first_text} |{mid_text} "
                     f"{mean_ci(finals[variant])[0]} | {mean_ci(at_wall[variant])[0]} | "
                     f"{mean_ci([late_reward(r) for r in runs])[0]} | {trajectories:.0f} | {tokens:.0f} | {wall} |")
    return lines, finals, at_wall, equal_wall, at_mid, middle


def comparison_verdicts(table_result, baseline, others):
    """The verdict lines under a comparison table: the baseline against each
    other variant at equal trajectories (mid-run where measured, final) and
    at equal wall time, then one sentence per measure on the paper's order."""
    _, finals, at_wall, equal_wall, at_mid, middle = table_result
    measures = []
    if middle:
        measures.append((at_mid, f"At equal trajectories, a third of the way (held-out accuracy at step {middle}):",
                         f"equal trajectories, step {middle}"))
    measures.append((finals, "At equal trajectories (final held-out accuracy):", "equal trajectories"))
    if equal_wall:
        measures.append((at_wall, f"At equal wall time ({equal_wall:.0f} s of training):", "equal wall time"))
    lines = []
    for values, heading, _ in measures:
        lines += [heading] + ["- " + verdict(values, baseline, other) for other in others] + [""]
    for values, _, what in measures:
        lines += [claim_check(values, baseline, others, what), ""]
    return lines


def verdict(values, a, b):
    """'A - B: +0.012 ± 0.020 (95% CI of the difference): not separated'."""
    if a not in values or b not in values:
        return f"{LABELS.get(a, a)} - {LABELS.get(b, b)}: not measured"
    return f"{LABELS.get(a, a)} - {LABELS.get(b, b)}: {welch_text(values[a], values[b])}"


def claim_check(values, baseline, others, what):
    """One plain sentence: does the paper's ordering (baseline best) hold
    here, judged by 95% Welch intervals of the difference?"""
    better, worse, tied = [], [], []
    for other in others:
        if other not in values or baseline not in values:
            continue
        difference, half = welch(values[baseline], values[other])
        if difference is None or half is None:
            continue
        (better if difference > half else worse if difference < -half else tied).append(LABELS.get(other, other))
    name = LABELS.get(baseline, baseline)
    if not (better or worse or tied):
        return f"**Not judged ({what}):** fewer than two seeds on a side."
    if worse:
        return (f"**Differs from the paper ({what}):** {name} is behind " + ", ".join(worse) +
                ", separated by the 95% interval of the difference.")
    if better and not tied:
        return f"**Holds ({what}):** {name} is ahead of every other variant, separated by the 95% intervals."
    return (f"**Not separated ({what}):** {name}" + (" is ahead of " + ", ".join(better) + " (separated) but" if better else "") +
            " not separated from " + ", ".join(tied) + f" at {len(values[baseline])} seeds.")


def moving(values, window):
    out, recent = [], []
    for value in values:
        if value is not None:
            recent.append(value)
            recent = recent[-window:]
        out.append(statistics.fmean(recent) if recent else None)
    return out


def stability_rows(runs):
    """One row per run (variant and seed)."""
    rows = []
    for variant, run_list in runs.items():
        for run in run_list:
            row = stability_row(run)
            if row is not None:
                rows.append((variant, os.path.basename(run["dir"])) + row)
    return rows


def collapse_step(steps):
    """Collapse: the 50-step mean reward falls below half the best it had
    reached so far (from step 50 on). The step it happens, or None."""
    smoothed = moving([number(s.get("reward_mean")) for s in steps], 50)
    peak_so_far = None
    for index, value in enumerate(smoothed):
        if value is None or index < 50:
            continue
        peak_so_far = value if peak_so_far is None else max(peak_so_far, value)
        if value < 0.5 * peak_so_far:
            return steps[index]["step"]
    return None


def stability_row(run):
    steps = run["steps"]
    if not steps:
        return None
    entropy = [number(s.get("entropy")) for s in steps]
    grad = [number(s.get("grad_norm")) for s in steps]
    reward = [number(s.get("reward_mean")) for s in steps]
    smoothed = moving(reward, 50)
    collapse = collapse_step(steps)
    ent = [e for e in entropy if e is not None]
    grads = [g for g in grad if g is not None]
    accuracies = ", ".join(f"{e['step']}: {e['heldout_accuracy']:.3f}" for e in run["evals"] if number(e["heldout_accuracy"]) is not None)
    trajectories = sum(s.get("trajectories") or 0 for s in steps)
    return (len(steps), ent[:50], ent[-50:], grads, smoothed, collapse, accuracies, trajectories)


def stability_run_table(runs):
    """One row per run: entropy, gradient norm, smoothed reward, collapse and
    held-out accuracy at every evaluation."""
    lines = ["| variant | seed | steps | trajectories (per step) | entropy, first 50 steps | entropy, last 50 | "
             "grad norm max | reward (50-step mean) start -> end | collapse (reward < half its best so far) | "
             "held-out by step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for variant, seed, count, ent_first, ent_last, grads, smoothed, collapse, accuracies, trajectories in \
            stability_rows(runs):
        valid = [v for v in smoothed if v is not None]
        lines.append(f"| {LABELS.get(variant, variant)} | {seed} | {count} | {trajectories:.0f} "
                     f"({trajectories / count:.1f}) | {statistics.fmean(ent_first):.3f} | "
                     f"{statistics.fmean(ent_last):.3f} | {max(grads):.2f} | "
                     f"{valid[50 if len(valid) > 50 else 0]:.3f} -> {valid[-1]:.3f} | "
                     f"{'none' if collapse is None else 'at step ' + str(collapse)} | {accuracies} |")
    return lines + [""]


def stability_plots(runs, images, report, prefix):
    lines = []
    for axis in ("step", "trajectories"):
        png = os.path.join(images, f"{prefix}_{axis}.png")
        plot([(v, r) for v, r in runs.items()], png, axis,
             "reward,accuracy,entropy,grad_norm,staleness,dis_rejection", 25)
        lines += [f"![{prefix.replace('_', ' ')} vs {axis}]({os.path.relpath(png, os.path.dirname(report))})", ""]
    return lines


def best_accuracy(run):
    values = [number(e["heldout_accuracy"]) for e in run["evals"]]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def stability_worked_section(variants, images, report):
    """The long-run claim, powered: SAO and GRPO-async for 1,000 updates on
    the default run's task, past its ceiling. The comparison table (held-out
    a third of the way, final, at equal wall time) and a table of what a
    collapse would show: the drop from each run's best held-out accuracy,
    collapses, entropy, gradient norms and importance ratios."""
    order = ["sao", "grpo_async"]
    present = [v for v in order if v in variants]
    if not present:
        return []
    steps = max(len(r["steps"]) for v in present for r in variants[v])
    lines = [f"## Stability on worked arithmetic: {steps:,} updates", "", f"Paper: {PAPER['stability']}", "",
             "`bench/evidence.sh --only worked_stability --seeds 5`: the default run's task and warm start, SAO and",
             "asynchronous GRPO with the worked comparison's settings (64 trajectories per update: SAO 64 x 1, GRPO 8",
             "prompts x 8; staleness limit 4; actor lr 1e-5), run for 1,000 updates instead of 300, i.e. 700 updates",
             "past the point where both reach the task's ceiling (~0.93): a policy that keeps sharpening on its own",
             "stale samples is where a collapse would show. Collapse: the 50-update mean training reward falls below",
             "half its best so far. Means with 95% t-intervals over seeds; differences with 95% Welch intervals.", ""]
    result = comparison_table({v: variants[v] for v in present}, present)
    lines += result[0] + [""]
    lines += comparison_verdicts(result, "sao", present[1:])
    lines += ["| variant | seeds | held-out best (any evaluation) | final - best | collapsed | entropy, first 50 "
              "updates | entropy, last 50 | grad norm max | ratio max | tokens outside the DIS band | staleness "
              "seen (mean) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    # One pass over each run's steps (stability_row) gives the entropy,
    # gradient norms and collapse the per-run table below shows too.
    rows = {v: [stability_row(r) for r in variants[v]] for v in present}
    bests = {v: [best_accuracy(r) for r in variants[v]] for v in present}
    drops = {v: [None if best is None or final_accuracy(r) is None else final_accuracy(r) - best
                 for r, best in zip(variants[v], bests[v])] for v in present}
    collapsed = {v: sum(row is not None and row[5] is not None for row in rows[v]) for v in present}
    for variant in present:
        runs, valid = variants[variant], [row for row in rows[variant] if row is not None]
        first = [statistics.fmean(row[1]) for row in valid if row[1]]
        last = [statistics.fmean(row[2]) for row in valid if row[2]]
        grads = [max(row[3]) for row in valid if row[3]]
        ratios = [v for v in (run_max(r, "ratio_max") for r in runs) if v is not None]
        rejected = [run_mean(r, "dis_reject_low_frac", "dis_reject_high_frac") for r in runs]
        rejected = [v for v in rejected if v is not None]
        staleness = [v for v in (run_mean(r, "staleness_mean") for r in runs) if v is not None]
        text = lambda values, form, pick=statistics.fmean: format(pick(values), form) if values else "-"
        lines.append(f"| {LABELS.get(variant, variant)} | {len(runs)} | "
                     f"{mean_ci(bests[variant])[0]} | {mean_ci(drops[variant])[0]} | "
                     f"{collapsed[variant]}/{len(runs)} | {mean_ci(first)[0]} | {mean_ci(last)[0]} | "
                     f"{text(grads, '.2f', max)} | {text(ratios, '.3g', max)} | "
                     f"{text([100 * v for v in rejected], '.2f')}{'%' if rejected else ''} | "
                     f"{text(staleness, '.2f')} |")
    lines += ["", "Grad norm max and ratio max: the largest over every update of every seed.", ""]
    if len(present) > 1:
        lines += [f"- Best evaluation, {verdict(bests, 'sao', present[1])}",
                  f"- Drop from the best evaluation, {verdict(drops, 'sao', present[1])}", ""]
    total = sum(len(variants[v]) for v in present)
    if not any(collapsed.values()):
        call = (f"**Verdict:** none of the {total} runs collapsed, SAO's or GRPO-async's: at this task's learning "
                f"rates and staleness limit, asynchronous GRPO is stable for {steps:,} updates too, so the paper's "
                "contrast (SAO holds where GRPO-async collapses) is not reproduced by length of training alone; "
                "what the runs decide is in the verdict lines above. The staleness stress sections provoke the "
                "collapse side of the claim with data up to 32 versions old.")
    else:
        call = ("**Verdict:** collapsed runs: " +
                ", ".join(f"{LABELS.get(v, v)} {collapsed[v]} of {len(variants[v])}" for v in present) + ".")
    lines += [call, ""]
    lines += ["Every run:", ""] + stability_run_table({v: variants[v] for v in present})
    lines += stability_plots({v: variants[v] for v in present}, images, report, "stability_worked")
    return lines


def drift_rows(runs, window=10, tolerance=0.05):
    """Recovery after each switch as the project defines it
    (sao::env::recovery_after_switches), printed by bench_drift_recovery."""
    rows = []
    for variant, run_list in runs.items():
        for run in run_list:
            output = subprocess.run(["./build/bench/bench_drift_recovery", run["dir"], str(window), str(tolerance)],
                                    capture_output=True, text=True, check=True).stdout
            lines = output.splitlines()
            header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["switch"])
            for line in lines[header + 1:]:
                fields = line.split()
                if len(fields) != 6 or not fields[0].isdigit():
                    break
                switch, _, pre_level, first_window, last_window, recover = fields
                rows.append((variant, os.path.basename(run["dir"]), int(switch), float(pre_level), float(first_window),
                             None if int(recover) < 0 else int(recover), float(last_window)))
    return rows


def gain_lines(rows, per_switch=False):
    """Reward gain inside each new regime (last 10 - first 10 steps) per
    variant over switches and seeds, and SAO against each other variant;
    with per_switch, SAO against each other variant at each switch too
    (switches of different kinds pooled give a wide interval)."""
    gains, at_switch = {}, {}
    for variant, _, switch, _, after, _, last in rows:
        gains.setdefault(variant, []).append(last - after)
        at_switch.setdefault(switch, {}).setdefault(variant, []).append(last - after)
    lines = [""] + [f"- {LABELS.get(v, v)}: reward gain inside a regime (last 10 - first 10 steps) over all "
                    f"switches and seeds {mean_ci(g)[0]}" for v, g in gains.items()]
    if "sao" in gains:
        for other in (v for v in gains if v != "sao"):
            lines.append(f"- SAO - {LABELS.get(other, other)}, gain: {welch_text(gains['sao'], gains[other])}")
        if per_switch:
            for switch, by_variant in sorted(at_switch.items()):
                for other in (v for v in by_variant if v != "sao" and "sao" in by_variant):
                    lines.append(f"- switch at step {switch}: SAO - {LABELS.get(other, other)}, gain: "
                                 f"{welch_text(by_variant['sao'], by_variant[other])}")
    return lines


def drift_table(runs):
    """Per variant and switch, over seeds: reward before, right after, at the
    end of the regime, and recovery steps."""
    rows = drift_rows(runs)
    by_key = {}
    for variant, _, switch, before, after, recovered, last in rows:
        by_key.setdefault((variant, switch), []).append((before, after, last, recovered))
    lines = ["| variant | switch at step | seeds | reward before | first 10 after | last 10 of the regime | "
             "gain within the regime | recovery steps (seeds recovered) |", "|---|---|---|---|---|---|---|---|"]
    for (variant, switch), values in sorted(by_key.items(), key=lambda item: (VARIANT_ORDER.index(item[0][0])
                                                                              if item[0][0] in VARIANT_ORDER else 99,
                                                                              item[0][1])):
        before = mean_ci([v[0] for v in values])[0]
        after = mean_ci([v[1] for v in values])[0]
        last = mean_ci([v[2] for v in values])[0]
        gain = mean_ci([v[2] - v[1] for v in values])[0]
        recovered = [v[3] for v in values if v[3] is not None]
        recovery = f"{statistics.fmean(recovered):.0f} ({len(recovered)}/{len(values)})" if recovered else \
            f"- (0/{len(values)})"
        lines.append(f"| {LABELS.get(variant, variant)} | {switch} | {len(values)} | {before} | {after} | {last} | "
                     f"{gain} | {recovery} |")
    return lines, rows


def summary_of(run):
    with open(os.path.join(run["dir"], "summary.json")) as handle:
        return json.load(handle)


def pipeline_section(variants):
    """Asynchrony at this scale: busy fractions, latencies, and wall time to a
    held-out accuracy every variant reaches."""
    order = [v for v in ("sao", "grpo_async", "grpo_sync", "ppo") if v in variants]
    best = {}
    for variant in order:
        per_eval = {}
        for run in variants[variant]:
            for e in run["evals"]:
                if number(e["heldout_accuracy"]) is not None:
                    per_eval.setdefault(e["step"], []).append(e["heldout_accuracy"])
        best[variant] = max(statistics.fmean(v) for v in per_eval.values())
    target = min(best.values())
    lines = ["## Pipeline (arithmetic runs above)", "",
             "Learner busy = time inside learner steps / run wall time. Rollout busy = time the rollout actors spend",
             "decoding / their lifetime, and runtime share = the process CPU spent outside model maths, environment",
             "calls and weight (de)serialisation (the actor runtime, messaging, metrics), both from the time accounting",
             "in each run's summary.json. Latency = from an episode's end to the start of",
             "the learner step that trains on it (summary.json, all steps of all seeds). Time to target = wall time of",
             f"the first evaluation at or above {target:.3f} held-out accuracy (the lowest best-mean of the variants, so",
             "every variant reaches it on average), averaged over the seeds that reach it.", "",
             "| variant | learner busy | rollout busy | runtime share of CPU | learner idle ms p50 / p99 | "
             "rollout->learner ms p50 / p99 | time to target s (seeds reaching) |",
             "|---|---|---|---|---|---|---|"]
    for variant in order:
        busy, idle50, idle99, lat50, lat99, reach = [], [], [], [], [], []
        rollout_busy, runtime_share = [], []
        for run in variants[variant]:
            steps = run["steps"]
            wall = steps[-1]["wall_time_s"] if steps else None
            if wall:
                busy.append(sum(s.get("learner_step_ms") or 0 for s in steps) / 1e3 / wall)
            summary = summary_of(run)
            accounting = summary.get("time_accounting")
            if accounting:
                decoders = [a["busy_frac"] for a in accounting["actors"] if a["kind"] == "rollout"]
                rollout_busy.append(statistics.fmean(decoders) if decoders else None)
                runtime_share.append(statistics.fmean(n["other_cpu_share"] for n in accounting["nodes"].values()))
            idle50.append(summary.get("learner_idle_ms_p50"))
            idle99.append(summary.get("learner_idle_ms_p99"))
            lat50.append(summary.get("rollout_to_learner_ms_p50"))
            lat99.append(summary.get("rollout_to_learner_ms_p99"))
            for e in run["evals"]:
                if number(e["heldout_accuracy"]) is not None and e["heldout_accuracy"] >= target - 1e-12:
                    reach.append(e["wall_time_s"])
                    break
        avg = lambda values: statistics.fmean([v for v in values if v is not None]) if any(v is not None for v in values) else float("nan")
        reached = f"{statistics.fmean(reach):.1f} ({len(reach)}/{len(variants[variant])})" if reach else f"- (0/{len(variants[variant])})"
        percent = lambda values: f"{100 * avg(values):.0f}%" if any(v is not None for v in values) else "-"
        lines.append(f"| {LABELS.get(variant, variant)} | {100 * avg(busy):.0f}% | {percent(rollout_busy)} | "
                     f"{percent(runtime_share)} | {avg(idle50):.1f} / {avg(idle99):.1f} | "
                     f"{avg(lat50):.0f} / {avg(lat99):.0f} | {reached} |")
    return lines + [""]


STALENESS_METHODS = [("sao", "SAO (DIS)"), ("sao_ppo_clip", "SAO, PPO clip"),
                     ("is_pg", "SAO's critic, importance-weighted PG, no trust region"),
                     ("grpo_async", "GRPO G=8, asynchronous (PPO clip)")]
STALENESS_TITLE = "## Staleness stress: training on data D versions old"
STALENESS_WORKED_TITLE = "## Staleness stress on worked arithmetic (the default run's task)"


def run_mean(run, *keys):
    """Mean over a run's steps of the sum of `keys` (steps lacking them skipped)."""
    values = []
    for step in run["steps"]:
        parts = [number(step.get(k)) for k in keys]
        if all(p is not None for p in parts):
            values.append(sum(parts))
    return statistics.fmean(values) if values else None


def run_max(run, key):
    values = [number(s.get(key)) for s in run["steps"]]
    values = [v for v in values if v is not None]
    return max(values) if values else None


STALENESS_HOW = {
    "arith": (STALENESS_TITLE, "staleness", "`bench/evidence.sh --only staleness [--seeds N]`: arithmetic from the "
              "shared warm start, 200 learner steps"),
    "worked": (STALENESS_WORKED_TITLE, "staleness_worked", "`bench/evidence.sh --only worked_staleness [--seeds N]`: "
               "the default run's task (worked arithmetic) from its warm start, 100 learner steps (80 runs fit in a "
               "session; SAO is at ~0.86 by then in the worked comparison, still learning)"),
}


def staleness_section(variants, images, report, task="arith"):
    """One row per method and delay; verdicts: each method against SAO at
    the same delay, and each method's largest delay against its delay 0."""
    title, prefix, how = STALENESS_HOW[task]
    cells = {}
    for name, runs in variants.items():
        method, _, delay = name.rpartition("_d")
        if delay.isdigit():
            cells[(method, int(delay))] = runs
    delays = sorted({d for _, d in cells})
    if not cells:
        return []
    seeds = sorted({len(r) for r in cells.values()})
    lines = [title, "",
             "Paper: asynchronous GRPO collapses as data gets stale, while SAO's token-level trust region (DIS) holds.",
             "", how + " of 64 trajectories each (GRPO: 8 prompts x 8) at the default run's learning rates (actor "
             "1e-5, critic 5e-3), `rollout.weight_delay_versions=D` (the weight-sync "
             "actor hands rollouts the newest version at least D behind the learner's) and `replay.max_staleness=D+4`. "
             "The importance-weighted PG is SAO with the DIS band opened to (0, inf) (`learner.dis_eps_low=1 "
             "learner.dis_eps_high=1e30`): every token is kept at its full ratio. Collapse: the 50-step mean training "
             "reward falls below half its best so far. Rejected/clipped: the share of action tokens outside the DIS "
             "band (SAO, IS-PG) or clipped by PPO, low + high, mean over steps. Ratio max: the largest token "
             "importance ratio of a run, median over seeds. Intervals are 95% t-intervals over seeds "
             f"(seeds per cell: {', '.join(str(n) for n in seeds)}).", "",
             "| method | D | staleness seen (mean) | held-out before | held-out final, mean [95% CI] | collapsed | "
             "rejected / clipped tokens | ratio max | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    finals = {}
    for method, label in STALENESS_METHODS:
        for delay in delays:
            runs = cells.get((method, delay))
            if not runs:
                continue
            finals[(method, delay)] = [final_accuracy(r) for r in runs]
            final_text = mean_ci(finals[(method, delay)])[0]
            before = mean_spread([first_accuracy(r) for r in runs])[1]
            collapsed = sum(collapse_step(r["steps"]) is not None for r in runs)
            staleness = [v for v in (run_mean(r, "staleness_mean") for r in runs) if v is not None]
            staleness = statistics.fmean(staleness) if staleness else None
            rejected = [run_mean(r, "dis_reject_low_frac", "dis_reject_high_frac") for r in runs]
            rejected = [v if v is not None else run_mean(r, "ppo_clip_low_frac", "ppo_clip_high_frac")
                        for v, r in zip(rejected, runs)]
            rejected = [v for v in rejected if v is not None]
            ratio = [v for v in (run_max(r, "ratio_max") for r in runs) if v is not None]
            walls = [r["wall"] for r in runs if r["wall"] is not None]
            text = lambda value, form: "-" if value is None else format(value, form)
            lines.append(f"| {label} | {delay} | {text(staleness, '.1f')} | {text(before, '.3f')} | {final_text} | "
                         f"{collapsed}/{len(runs)} | "
                         f"{text(100 * statistics.fmean(rejected) if rejected else None, '.2f')}% | "
                         f"{text(statistics.median(ratio) if ratio else None, '.3g')} | "
                         f"{text(statistics.fmean(walls) if walls else None, '.0f')} |")
    lines.append("")
    for delay in delays:
        for method, label in STALENESS_METHODS[1:]:
            if ("sao", delay) in finals and (method, delay) in finals:
                lines.append(f"- D={delay}: SAO (DIS) - {label}: "
                             f"{welch_text(finals[('sao', delay)], finals[(method, delay)])}")
    lines.append("")
    top = delays[-1]
    for method, label in STALENESS_METHODS:
        if (method, 0) in finals and (method, top) in finals and top != 0:
            lines.append(f"- {label}, D={top} - D=0: {welch_text(finals[(method, top)], finals[(method, 0)])}")
    lines.append("")
    collapsed = sum(collapse_step(r["steps"]) is not None for runs in cells.values() for r in runs)
    total = sum(len(runs) for runs in cells.values())
    compared = [line for line in lines if line.endswith("separated")]
    separated = [line for line in lines if line.endswith(": separated")]
    lines += [f"**Verdict:** {collapsed} of {total} runs collapsed; "
              + (f"{len(separated)} of the {len(compared)} differences above "
                 f"{'is' if len(separated) == 1 else 'are'} separated by their 95% intervals."
                 if min(seeds) >= 2 else
                 "with one seed per cell no difference is judged: rerun with `--seeds 5` to decide."), ""]
    relative = os.path.dirname(report)
    # Plot labels are the variant names: `sao plot` reads LABEL=DIR,DIR and a
    # long label holds '=' and ','.
    groups = [(m, cells[(m, top)]) for m, _ in STALENESS_METHODS if (m, top) in cells]
    png = os.path.join(images, f"{prefix}_d{top}.png")
    plot(groups, png, "step", "reward,accuracy,dis_rejection,staleness")
    lines += [f"![every method at D={top}]({os.path.relpath(png, relative)})", ""]
    for method, label in STALENESS_METHODS:
        groups = [(f"D{d}", cells[(method, d)]) for d in delays if (method, d) in cells]
        if groups:
            png = os.path.join(images, f"{prefix}_{method}.png")
            plot(groups, png, "step", "reward,accuracy")
            lines += [f"![{label} at each D]({os.path.relpath(png, relative)})", ""]
    return lines


def heading_level(line):
    """2 for '## ...', 3 for '### ...', 0 for any other line."""
    hashes = len(line) - len(line.lstrip("#"))
    return hashes if hashes in (2, 3) and line[hashes:hashes + 1] == " " else 0


def headings(lines):
    """(index, level) of every heading outside fenced code blocks (bench
    output inside ``` may hold lines that start with '#')."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and heading_level(line):
            found.append((i, heading_level(line)))
    return found


def split_sections(lines, level):
    """The generated page cut at its headings of `level`: [(heading, lines)],
    the part before the first heading under heading None."""
    cuts = [i for i, l in headings(lines) if l == level]
    parts = [(None, lines[:cuts[0]] if cuts else lines)]
    for start, end in zip(cuts, cuts[1:] + [len(lines)]):
        parts.append((lines[start], lines[start:end]))
    return parts


def splice(report, section_lines):
    """Puts a generated section (its first line is its '## ' or '### '
    heading) into an existing report: in place of the section of that heading,
    or when new, a '## ' section before the hand-written sections (fault
    tolerance, benchmarks, GPU) and a '### ' one at the end of the benchmarks."""
    with open(report) as handle:
        lines = handle.read().rstrip("\n").split("\n")
    heading = section_lines[0]
    level = heading_level(heading)
    body = section_lines if section_lines[-1] == "" else section_lines + [""]
    marks = headings(lines)
    starts = [i for i, _ in marks if lines[i] == heading]
    if starts:
        start = starts[0]
        end = next((i for i, l in marks if i > start and l <= level), len(lines))
        lines[start:end] = body
    elif level == 2:
        anchors = [i for i, l in marks if l == 2 and (lines[i].startswith("## Fault tolerance") or
                                                      lines[i].startswith("## Runtime benchmarks"))]
        at = anchors[0] if anchors else len(lines)
        lines[at:at] = body
    else:
        bench = [i for i, _ in marks if lines[i].startswith("## Runtime benchmarks")]
        if not bench:
            sys.exit(f"evidence_report: {report} has no '## Runtime benchmarks' section for {heading}")
        at = next((i for i, l in marks if i > bench[0] and l == 2), len(lines))
        lines[at:at] = body
    with open(report, "w") as handle:
        handle.write("\n".join(lines) + "\n")


# Which generated headings each evidence.sh part owns (prefixes of the line).
PART_HEADINGS = {
    "compare": ["## SAO vs GRPO vs PPO: arithmetic", "## Pipeline (arithmetic"],
    "worked": ["## SAO vs GRPO vs PPO: worked arithmetic"],
    "maze": ["## SAO vs GRPO vs PPO: maze"],
    "ablations": ["## Ablations (arithmetic)"],
    "worked_ablations": ["## Ablations (worked arithmetic)"],
    "worked_drift": ["## Online learning on worked arithmetic"],
    "stability": ["## Stability: "],
    "worked_stability": ["## Stability on worked arithmetic"],
    "staleness": [STALENESS_TITLE],
    "worked_staleness": [STALENESS_WORKED_TITLE],
    "drift": ["## Online learning: the drifting environment"],
}


def splice_parts(report, md, parts):
    """Replaces, inside an existing report, the generated sections of the
    named parts (plus the page's head and 'How each run is made'), leaving
    every other section, hand-written ones included, as it is."""
    own = ["## How each run is made"] + [h for part in parts for h in PART_HEADINGS.get(part, [])]
    sections = split_sections(md, 2)
    with open(report) as handle:
        old = handle.read().rstrip("\n").split("\n")
    old_head = split_sections(old, 2)[0][1]
    with open(report, "w") as handle:
        handle.write("\n".join(sections[0][1] + old[len(old_head):]) + "\n")
    for heading, lines in sections[1:]:
        if any(heading.startswith(prefix) for prefix in own):
            splice(report, lines)
        elif heading == "## Runtime benchmarks" and "bench" in parts:
            for _, sub_lines in split_sections(lines, 3)[1:]:
                splice(report, sub_lines)


BENCHES = [
    ("learner", "Learner: a full SAO step", "`./build/bench/bench_learner`: one SAO step (K critic updates + the DIS "
     "actor update) on 64 trajectories of the default model, in trained tokens/s and as a fraction of the fp32 matmul "
     "rate measured in the same run."),
    ("model", "Rollout: batched decode", "`./build/bench/bench_model 1`: training and batched KV-cache decode tokens/s "
     "of the default model on one thread, each against the matmul limit measured in the same run."),
    ("weight_sync", "Weight switch", "`./build/bench/bench_weight_sync 3`: one weight version from a learner-side actor "
     "to an actor in another process (serialise, loopback TCP, deserialise, reply) next to raw loopback TCP, and "
     "loading the received tensors into a model, which is what a rollout does in flight."),
    ("runtime_share", "Where the CPU goes, and the scheduler policy", "`bench/runtime_share.sh SFT 150 2`: the same RL "
     "run under CAF's two scheduler policies, alternating; shares of the process CPU from the time accounting in "
     "summary.json. `workers` is CAF's scheduler threads."),
    ("cluster_scaling", "Cluster throughput and the scaling model", "`bench/cluster_scaling.sh --warmup 10 --window 20 "
     "1 2 4`: a learner process and N rollout processes on this machine (deploy/local-cluster), then "
     "`bench/scaling_model.py` fits its model (see its header) to the N = 1 run's time accounting and predicts every N."),
]


def bench_section(out):
    """The runtime benchmarks' printed output, kept by `evidence.sh --only bench`."""
    found = [(name, title, how) for name, title, how in BENCHES
             if os.path.exists(os.path.join(out, "bench", name + ".txt"))]
    if not found:
        return []
    lines = ["## Runtime benchmarks", "",
             "Printed by the programs themselves (kept in `" + out + "/bench/`); rerun one by deleting its file and "
             "running `bench/evidence.sh --only bench`.", ""]
    for name, title, how in found:
        with open(os.path.join(out, "bench", name + ".txt")) as handle:
            text = handle.read().rstrip()
        lines += [f"### {title}", "", how, "", "```", text, "```", ""]
    return lines


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
    # --splice PART,...: regenerate only those parts' sections inside the
    # existing report, so a part can be rerun without the runs of the others
    # and the hand-written sections (fault tolerance, GPU, ...) stay.
    parts = None
    if len(sys.argv) > 5 and sys.argv[4] == "--splice":
        parts = sys.argv[5].split(",")
        known = list(PART_HEADINGS) + ["bench"]
        unknown = [p for p in parts if p not in known]
        if unknown:
            sys.exit(f"evidence_report: --splice knows {', '.join(known)}; got {', '.join(unknown)}")
        if not os.path.exists(report):
            sys.exit(f"evidence_report: --splice needs an existing report; {report} is missing")
    md = ["# Results: the paper's claims at small scale", "",
          "Generated by `bench/evidence.sh` (runs) and `bench/evidence_report.py` (this page) from the raw",
          f"`metrics.jsonl` of every run under `{out}/`; rebuild it without rerunning with",
          "`bench/evidence.sh --report-only`. Rerun a part with `bench/evidence.sh --only PART` (compare, worked,",
          "worked_ablations, worked_drift, worked_staleness, worked_stability, maze, ablations, stability, staleness, drift,",
          "bench), which replaces that part's sections and leaves the rest of this page.",
          "", f"Hardware: {hardware()}.", "",
          "Scale: a 0.77M-parameter model, byte tokenizer, tasks built into the runtime (`arithmetic`, the agentic",
          "`maze`, the drifting `drift`), warm-started by SFT once per task and shared by all runs of that task;",
          "every run's seed (`run.seed`) changes sampling. Wall times were measured on a shared 2-core machine",
          "while other work ran: compare them within a table, not with other machines. A warm start is the same",
          "bit for bit on one machine, not across CPUs (docs/decisions.md, \"Warm starts differ across CPUs\"), so a",
          "part rerun elsewhere starts from its own warm start: compare its \"held-out before\" column first.", ""]
    md += ["## How each run is made", "",
           "Every run is `./build/sao train [--config FILE] --run-dir OUT/EXPERIMENT/VARIANT/seed_N --set run.seed=N "
           "--set train.init_checkpoint=OUT/sft_TASK/sft --set train.checkpoint_every=0 --set console.enabled=false` "
           "plus the overrides below (the exact lines are in `bench/evidence.sh`; each run's resolved config is its "
           "`config.json`). Seeds 1..N as each table's seeds (or seed) column says.", "",
           "- arithmetic: plain answers (the default config before 2026-12-06, as `config/arith_plain.json`: "
           "`task.demonstration_worked_rate=0 sft.curriculum=[] eval.max_new_tokens=8 rollout.max_new_tokens=8`, "
           "which every arithmetic run and warm start adds; actor lr 1e-5, critic lr 5e-3), `train.steps=300 train.eval_every=50`; SAO/PPO/ablations add "
           "`replay.min_batch=64 replay.max_batch=64 rollout.slots=64`; GRPO-sync is `config/grpo_arith.json`, "
           "GRPO-async `config/grpo_async_arith.json`; PPO `learner.algorithm=ppo`; ablations `learner.critic_updates=1`, "
           "`learner.freeze_critic_attention=false`, `learner.baseline=running_mean`, `learner.policy_loss=ppo`.",
           "- worked: the default config as it is (its warm start: `sao sft --run-dir OUT/sft_worked`), "
           "`train.steps=300 train.eval_every=50`, the same algorithms and 64 trajectories per update as arithmetic.",
           "- worked_ablations: the worked runs with the arithmetic ablations' one-setting changes.",
           "- worked_drift: `config/sao_drift_worked.json` from the worked warm start, `train.steps=300 "
           "train.eval_every=50`; SAO and running-mean (`learner.baseline=running_mean`) add the 64-trajectory "
           "updates above; GRPO adds `learner.algorithm=grpo learner.group_size=8 train.mode=sync rollout.num_actors=1 "
           "rollout.slots=64`.",
           "- worked_staleness: the worked warm start, `train.steps=100 train.eval_every=25`, each method and delay "
           "as in the staleness sweep below.",
           "- worked_stability: the worked runs of SAO and GRPO-async with `train.steps=1000 train.eval_every=100`.",
           "- maze: `config/sao_agentic.json` (SAO, PPO) / `config/grpo_agentic.json` (GRPO), `train.steps=100 "
           "train.eval_every=20`, 64 trajectories per update as above; GRPO-async adds `train.mode=async`.",
           "- stability: `train.steps=1000 train.eval_every=100 rollout.slots=8 replay.max_staleness=4`; "
           "GRPO-async adds `train.mode=async replay.min_batch=8 replay.max_batch=8`.",
           "- drift: `config/sao_drift.json`, `config/running_mean_drift.json`, `config/grpo_drift.json` as they are.",
           "- drift_tasks: the same three configs with `task.operators=+-* task.regimes=[\"plain@+\",\"plain@*\"] "
           "task.demonstration_regimes=all task.test_size=60 task.switch_every=100 train.steps=300`.",
           "- warm starts: `sao sft --run-dir OUT/sft_arith` (plain answers, as above), `--config config/sao_agentic.json` (maze), "
           "`--config config/sao_drift.json` (drift; drift_tasks adds its task overrides and `sft.steps=150`).", ""]
    missing = [name for name in ("arith", "worked", "maze", "stability", "drift", "drift_tasks") if name not in found]
    if missing and parts is None:
        md += [f"Not run yet (no finished runs under `{out}/`): {', '.join(missing)}.", ""]

    for task, title in (("arith", "arithmetic (reasoning)"),
                        ("worked", "worked arithmetic (the default run's task: RL has room)"),
                        ("maze", "maze (agentic, multi-turn)")):
        if task not in found:
            continue
        variants = found[task]
        order = ["sao", "grpo_sync", "grpo_async", "ppo"]
        if not any(v in variants for v in order):
            continue
        md += [f"## SAO vs GRPO vs PPO: {title}", "", f"Paper: {PAPER['compare']}", "",
               "Every algorithm trains on 64 trajectories per update (SAO 64 x 1, GRPO 8 prompts x 8) for the same",
               "number of updates, so trajectories and generated tokens are matched.", ""]
        result = comparison_table(variants, order)
        md += result[0] + [""]
        md += comparison_verdicts(result, "sao", ["grpo_sync", "grpo_async", "ppo"])
        groups = [(v, variants[v]) for v in order if v in variants]
        for axis in ("trajectories", "tokens", "wall_time_s"):
            png = os.path.join(images, f"{task}_compare_{axis}.png")
            plot(groups, png, axis, "accuracy,reward")
            md += [f"![{task} held-out accuracy and reward vs {axis}]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "arith" in found and "sao" in found["arith"] and "grpo_sync" in found["arith"]:
        md += pipeline_section(found["arith"])

    for task, title, note in (
            ("arith", "arithmetic", []),
            ("worked", "worked arithmetic", [
                "The default run's task, where RL has the most room (pass@8 of the warm start 0.830 against greedy",
                "0.195). SAO's runs are the worked comparison's above; each ablation changes one setting of them.", ""])):
        if task not in found or not any(v.startswith("sao_") for v in found[task]):
            continue
        variants = found[task]
        order = ["sao", "sao_k1", "sao_unfrozen_critic", "sao_running_mean", "sao_ppo_clip"]
        md += [f"## Ablations ({title})", "", f"Paper: {PAPER['ablations']}", ""] + note
        result = comparison_table(variants, order)
        md += result[0] + [""]
        md += comparison_verdicts(result, "sao", order[1:])
        png = os.path.join(images, f"{task}_ablations.png")
        plot([(v, variants[v]) for v in order if v in variants], png, "trajectories", "accuracy,reward")
        md += [f"![{task} ablations]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "stability_worked" in found:
        md += stability_worked_section(found["stability_worked"], images, report)

    if "stability" in found:
        md += ["## Stability: 1,000 learner steps on the maze", "", f"Paper: {PAPER['stability']}", "",
               "Both use the same staleness limit (4). SAO steps on whatever has arrived (min_batch 1, up to 64), GRPO-async",
               "on exactly one group of 8, so per step they see different numbers of trajectories (columns below); the",
               "second plot puts both on the trajectories axis. Long agentic runs at few seeds (~1 h per seed pair here):",
               "an illustration beside the powered section \"Stability on worked arithmetic\", not a verdict.", ""]
        md += stability_run_table(found["stability"])
        md += stability_plots(found["stability"], images, report, "stability")

    if "staleness" in found:
        md += staleness_section(found["staleness"], images, report)
    if "staleness_worked" in found:
        md += staleness_section(found["staleness_worked"], images, report, "worked")

    if "drift" in found:
        md += ["## Online learning: the drifting environment", "", f"Paper: {PAPER['drift']}", "",
               "Recovery as `sao::env::recovery_after_switches` defines it (src/env/tasks/drift_env.hpp), computed by",
               "`build/bench/bench_drift_recovery RUN_DIR 10 0.05`: reward before = mean of the 10 steps before the switch,",
               "first 10 after = the 10 steps after it, last 10 = the last 10 steps before the next switch (or the end),",
               "recovery = steps until a 10-step mean made only of post-switch steps is within 0.05 of the level before",
               "(10 at the earliest; - = not before the next switch or the end). Means with 95% t-intervals over seeds.", "",
               "### A new answer style", "",
               "The required answer style switches every 50 learner steps (plain, then reversed digits, then plain);",
               "the warm start (SFT) answered plain only.", ""]
        table, rows = drift_table(found["drift"])
        md += table
        first_switch = min(r[2] for r in rows)
        md += ["", "Inside the new (reversed) regime, i.e. after the first switch:"]
        md += gain_lines([r for r in rows if r[2] == first_switch])[1:]
        recovered_new = [r for r in rows if r[5] is not None and r[4] < r[3] - 0.1]
        end_levels = {}
        for r in rows:
            if r[2] == first_switch:
                end_levels.setdefault(r[0], []).append(r[6])
        levels = ", ".join(f"{LABELS.get(v, v)} {mean_ci(values)[0]}" for v, values in end_levels.items())
        md += ["", ("**Differs from the paper here:** no variant recovers within a regime whose answers it must newly "
                    "learn (the drop after the first switch stays until the switch back)"
                    if not recovered_new else f"{len(recovered_new)} switch(es) with a drop were recovered from "
                    "within the regime") + "; every variant recovers within 10 steps when the old regime returns. "
               "The reversed answers of 2-digit sums are almost never sampled by the warm-started policy, so there "
               "is almost no reward signal to adapt from. The gains are not a fair race: in the asynchronous variants "
               "the first steps after a switch still train on episodes that started under the old regime (their "
               "'first 10 after' is higher), while synchronous GRPO's first batch after it is all new-regime. The "
               f"levels at the end of the reversed regime: {levels}.", ""]
        png = os.path.join(images, "drift.png")
        plot([(v, r) for v, r in found["drift"].items()], png, "step", "reward", 5)
        md += [f"![drift]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "drift_tasks" in found:
        md += ["### A change in what is asked", "",
               "Every 100 learner steps the training problems switch between 1-digit additions and 1-digit",
               "multiplications (regimes `plain@+`, `plain@*`); the warm start (150 SFT steps) saw both, in every",
               "answer style it is graded in, so each regime starts with reward to learn from. The held-out split mixes",
               "+, - and *.", ""]
        table, rows = drift_table(found["drift_tasks"])
        md += table
        md += gain_lines(rows)
        all_gain = all(last > after for _, _, _, _, after, _, last in rows)
        all_recovered = all(r[5] is not None for r in rows)
        md += ["", ("In every run each new regime was learned (reward higher at its end than right after the switch)"
                    if all_gain else "Not every run learned inside every regime (see the gain column)") + "; " +
               ("every switch was recovered from." if all_recovered else
                f"{sum(r[5] is None for r in rows)} of {len(rows)} switches were not recovered from."), ""]
        png = os.path.join(images, "drift_tasks.png")
        plot([(v, r) for v, r in found["drift_tasks"].items()], png, "step", "reward,accuracy", 5)
        md += [f"![drift_tasks]({os.path.relpath(png, os.path.dirname(report))})", ""]

    if "drift_worked" in found:
        variants = found["drift_worked"]
        md += ["## Online learning on worked arithmetic: additions <-> subtractions", "", f"Paper: {PAPER['drift']}",
               "",
               "`bench/evidence.sh --only worked_drift`: the default run's task (1-2 digit + and -, worked answers",
               "graded by their answer) in the drifting environment, `config/sao_drift_worked.json`: every 100 updates",
               "the training problems switch between additions and subtractions (regimes `plain@+`, `plain@-`, then",
               "`plain@+` again). Every run starts from the default run's warm start (`OUT/sft_worked`, which saw both",
               "operators) and makes 300 updates of 64 trajectories: SAO and the running-mean baseline 64 x 1,",
               "asynchronous; GRPO 8 prompts x 8, synchronous. The held-out split is the worked comparison's 400",
               "problems (both operators), so its numbers compare with that section's. Recovery and gains as defined",
               "in the section above; means with 95% t-intervals over seeds.", ""]
        table, rows = drift_table(variants)
        md += table
        md += gain_lines(rows, per_switch=True)
        all_gain = all(last > after for _, _, _, _, after, _, last in rows)
        all_recovered = all(r[5] is not None for r in rows)
        md += ["", ("In every run each new regime was learned (reward higher at its end than right after the switch)"
                    if all_gain else f"{sum(last <= after for _, _, _, _, after, _, last in rows)} of {len(rows)} "
                    "regimes did not gain reward from their first 10 steps to their last 10") + "; " +
               ("every switch was recovered from." if all_recovered else
                f"{sum(r[5] is None for r in rows)} of {len(rows)} switches were not recovered from."), ""]
        order = ["sao", "running_mean", "grpo"]
        result = comparison_table(variants, order)
        md += ["Held-out accuracy across the drift (both operators):", ""] + result[0] + [""]
        md += comparison_verdicts(result, "sao", order[1:])
        png = os.path.join(images, "drift_worked.png")
        plot([(v, variants[v]) for v in order if v in variants], png, "step", "reward,accuracy", 5)
        md += [f"![drift on worked arithmetic]({os.path.relpath(png, os.path.dirname(report))})", ""]

    md += bench_section(out)

    if parts is not None:
        splice_parts(report, md, parts)
        print(f"updated {report}: {', '.join(parts)}")
        return
    with open(report, "w") as handle:
        handle.write("\n".join(md) + "\n")
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
