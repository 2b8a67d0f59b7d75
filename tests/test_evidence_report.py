#!/usr/bin/env python3
"""Tests of bench/evidence_report.py, the program that turns runs into
docs/results.md: its statistics (exact values), the collapse and mid-run
rules, the worked-stability section on synthetic runs, and how a rerun part
is spliced into an existing page. Plots are recorded, not drawn, so the test
needs no build."""
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import evidence_report as report  # noqa: E402

PLOTS = []
report.plot = lambda groups, png, axis, panels, smooth=10: PLOTS.append((png, axis, [label for label, _ in groups]))


def synthetic_run(name, rewards, accuracies, wall_per_step=1.0, extra=None):
    """A run as read_run returns it: one step record per reward, evaluations
    every 100 steps (accuracies[k] at step 100 k)."""
    steps = []
    for index, reward in enumerate(rewards):
        record = {"step": index + 1, "reward_mean": reward, "entropy": 1.0 - index / (2 * len(rewards)),
                  "grad_norm": 1.0 + index % 3, "ratio_max": 1.5, "trajectories": 64, "tokens": 640,
                  "staleness_mean": 1.0, "dis_reject_low_frac": 0.01, "dis_reject_high_frac": 0.02}
        record.update(extra or {})
        steps.append(record)
    evals = [{"step": 100 * k, "heldout_accuracy": a, "wall_time_s": 100 * k * wall_per_step}
             for k, a in enumerate(accuracies)]
    return {"dir": f"/runs/{name}", "steps": steps, "evals": evals, "wall": len(rewards) * wall_per_step}


class ReadRun(unittest.TestCase):
    def test_old_and_new_accuracy_keys_read_alike(self):
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "metrics.jsonl"), "w") as handle:
                handle.write('{"eval": true, "step": 0, "accuracy": 0.25, "wall_time_s": 1.0}\n')
                handle.write('{"step": 1, "reward_mean": 0.5, "accuracy": 0.5}\n')
                handle.write('{"eval": true, "step": 1, "heldout_accuracy": 0.75, "wall_time_s": 2.0}\n')
            run = report.read_run(directory)
        self.assertEqual([e["heldout_accuracy"] for e in run["evals"]], [0.25, 0.75])
        self.assertEqual(report.first_accuracy(run), 0.25)
        self.assertEqual(report.final_accuracy(run), 0.75)


class Statistics(unittest.TestCase):
    def test_mean_ci_is_the_t_interval(self):
        text, mean, half = report.mean_ci([0.1, 0.2, 0.3])
        self.assertAlmostEqual(mean, 0.2, places=12)
        self.assertAlmostEqual(half, 4.303 * 0.1 / math.sqrt(3), places=12)
        self.assertEqual(text, "0.200 [-0.048, 0.448]")
        self.assertEqual(report.mean_ci([0.5])[0], "0.500 (1 seed)")
        self.assertEqual(report.mean_ci([None])[0], "-")

    def test_welch_interval_and_verdict(self):
        difference, half = report.welch([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
        self.assertAlmostEqual(difference, 2.0, places=12)
        # b has no variance: df = n_a - 1 = 2, half = t(2) * sd_a / sqrt(3).
        self.assertAlmostEqual(half, 4.303 * 1.0 / math.sqrt(3), places=12)
        self.assertEqual(report.welch_text([1.0, 2.0, 3.0], [0.0, 0.0, 0.0]),
                         "+2.000 ± 2.484 (95% CI of the difference): not separated")
        self.assertTrue(report.welch_text([1.0, 1.1, 0.9], [0.0, 0.1, -0.1]).endswith(": separated"))
        self.assertEqual(report.welch_text([1.0], [0.0, 0.1]),
                         "+0.950 (fewer than 2 seeds on a side: not judged)")

    def test_t_quantile_uses_the_smaller_tabulated_df(self):
        self.assertEqual(report.t975(4), 2.776)
        self.assertEqual(report.t975(11), 2.228)
        self.assertEqual(report.t975(0), float("inf"))


class Rules(unittest.TestCase):
    def test_collapse_is_the_50_step_mean_below_half_its_best(self):
        steady = [{"step": i + 1, "reward_mean": 0.8} for i in range(200)]
        self.assertIsNone(report.collapse_step(steady))
        falling = [{"step": i + 1, "reward_mean": 0.8 if i < 100 else 0.0} for i in range(200)]
        # The 50-step mean is 0.8 after 100 good steps and falls below half of
        # it once 26 of the last 50 steps are 0: at step 126.
        self.assertEqual(report.collapse_step(falling), 126)

    def test_mid_step_is_the_evaluation_nearest_a_third(self):
        runs = {"a": [synthetic_run("a", [0.5] * 1000, [0.1 * k for k in range(11)])]}
        self.assertEqual(report.mid_step(runs), 300)


class WorkedStability(unittest.TestCase):
    def setUp(self):
        PLOTS.clear()
        self.variants = {
            "sao": [synthetic_run(f"sao{s}", [0.8] * 1000, [0.2, 0.8, 0.9, 0.95 + s / 100] + [0.93] * 7)
                    for s in range(1, 4)],
            "grpo_async": [synthetic_run(f"grpo{s}", [0.8] * 500 + [0.1] * 500,
                                         [0.2, 0.7, 0.8, 0.85] + [0.9] * 6 + [0.5 + s / 100], 0.5,
                                         {"dis_reject_low_frac": None, "dis_reject_high_frac": None})
                           for s in range(1, 4)]}

    def test_section_reports_drop_collapses_and_plots(self):
        lines = report.stability_worked_section(self.variants, "/img", "/docs/results.md")
        page = "\n".join(lines)
        self.assertEqual(lines[0], "## Stability on worked arithmetic: 1,000 updates")
        self.assertIn("held-out at step 300 (a third of the way, equal trajectories)", page)
        sao_row = next(l for l in lines if l.startswith("| SAO (async") and "| 0/3 |" in l)
        grpo_row = next(l for l in lines if l.startswith("| GRPO G=8, asynchronous") and "| 3/3 |" in l)
        # SAO's best is its step-300 value 0.95 + s/100 (0.96, 0.97, 0.98),
        # its final 0.93; the interval's half-width is t(2) * 0.01 / sqrt(3).
        self.assertIn("| 0.970 [0.945, 0.995] | -0.040 [-0.065, -0.015] |", sao_row)
        self.assertIn("| 3.00% |", sao_row)  # 1% low + 2% high rejected tokens
        self.assertIn("| - | 1.00 |", grpo_row)  # no DIS band for GRPO; staleness 1
        self.assertIn("**Verdict:** collapsed runs: SAO (async, 1 rollout/prompt, critic, DIS) 0 of 3, "
                      "GRPO G=8, asynchronous 3 of 3.", page)
        self.assertIn("Best evaluation, SAO (async, 1 rollout/prompt, critic, DIS) - GRPO G=8, asynchronous: "
                      "+0.070 ± 0.025 (95% CI of the difference): separated", page)
        self.assertIn("Drop from the best evaluation, SAO (async, 1 rollout/prompt, critic, DIS) - GRPO G=8, "
                      "asynchronous: +0.340", page)
        self.assertEqual([(os.path.basename(p), axis) for p, axis, _ in PLOTS],
                         [("stability_worked_step.png", "step"), ("stability_worked_trajectories.png", "trajectories")])

    def test_no_collapse_says_the_contrast_is_not_reproduced(self):
        self.variants["grpo_async"] = self.variants["sao"]
        page = "\n".join(report.stability_worked_section(self.variants, "/img", "/docs/results.md"))
        self.assertIn("**Verdict:** none of the 6 runs collapsed", page)

    def test_no_runs_no_section(self):
        self.assertEqual(report.stability_worked_section({"ppo": self.variants["sao"]}, "/img", "/r.md"), [])


def splice_into(page, generated, parts):
    """The page after `splice_parts` put the named parts of `generated` in it."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "results.md")
        with open(path, "w") as handle:
            handle.write("\n".join(page) + "\n")
        report.splice_parts(path, generated, parts)
        with open(path) as handle:
            return handle.read()


class Splice(unittest.TestCase):
    def test_a_rerun_part_replaces_only_its_sections(self):
        page = ["# Results", "", "head", "", "## How each run is made", "", "old how", "",
                "## Stability: 1,000 learner steps on the maze", "", "maze rows", "",
                "## Fault tolerance", "", "hand-written", ""]
        generated = ["# Results", "", "new head", "", "## How each run is made", "", "new how", "",
                     "## Stability on worked arithmetic: 1,000 updates", "", "worked rows", "",
                     "## Stability: 1,000 learner steps on the maze", "", "regenerated maze rows", ""]
        text = splice_into(page, generated, ["worked_stability"])
        # The worked part is new: placed before the hand-written sections; the
        # maze stability section, another part, stays as it was.
        self.assertIn("new how", text)
        self.assertIn("maze rows", text)
        self.assertNotIn("regenerated maze rows", text)
        self.assertLess(text.index("worked rows"), text.index("## Fault tolerance"))
        self.assertIn("hand-written", text)

    def test_the_maze_stability_part_does_not_own_the_worked_section(self):
        page = ["# Results", "", "## Stability on worked arithmetic: 1,000 updates", "", "old worked rows", "",
                "## Stability: 1,000 learner steps on the maze", "", "old maze rows", ""]
        generated = ["# Results", "", "## Stability on worked arithmetic: 1,000 updates", "", "new worked rows", "",
                     "## Stability: 1,000 learner steps on the maze", "", "new maze rows", ""]
        text = splice_into(page, generated, ["stability"])
        self.assertIn("new maze rows", text)
        self.assertIn("old worked rows", text)


if __name__ == "__main__":
    unittest.main()
