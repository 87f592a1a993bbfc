"""Host tier, no PyTorch: torch_check's command line (__main__.py). --help, argument errors and a spec kiln
refuses need no PyTorch, and a refusal has its own exit code (3), apart from a numerics mismatch (1) and bad
usage (2).

    KILN=build/kiln python3 -m unittest -v torch_check.test_command      (from scripts/)

Every run of the command blocks `import torch` (sys.modules["torch"] = None), so these hold where PyTorch is
installed too. The one end-to-end run that needs PyTorch is skipped without it.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.dirname(HERE)
ROOT = os.path.dirname(SCRIPTS)
sys.path.insert(0, SCRIPTS)

from torch_check import __main__ as command  # noqa: E402
from torch_check.normalized import NormalizedError  # noqa: E402

KILN = os.environ.get("KILN", os.path.join(ROOT, "build", "kiln"))
HAVE_KILN = os.access(KILN, os.X_OK)
BAD_SPEC = ('{"tensors": {"x": {"dims": [2]}}, "nodes": [{"name": "n", "op": "nope", "inputs": ["x"], '
            '"outputs": ["y"]}], "outputs": ["y"]}')

# Runs the command as `python -m torch_check` (from scripts/) does, or as scripts/torch_check.py, with PyTorch
# made unimportable; prints whether anything imported it after all.
NO_TORCH = """import runpy, sys
sys.modules["torch"] = None
sys.path.insert(0, {scripts!r})
sys.argv = [{argv0!r}] + sys.argv[1:]
try:
    {run}
finally:
    print("torch imported:", any(m == "torch" or m.startswith("torch.") for m, v in sys.modules.items() if v),
          file=sys.stderr)
"""


def run_checker(args, entry="module", cwd=None):
    run = ('runpy.run_module("torch_check", run_name="__main__", alter_sys=True)' if entry == "module" else
           f'runpy.run_path({os.path.join(SCRIPTS, "torch_check.py")!r}, run_name="__main__")')
    code = NO_TORCH.format(scripts=SCRIPTS, argv0="torch_check", run=run)
    return subprocess.run([sys.executable, "-c", code] + list(args), capture_output=True, text=True,
                          cwd=cwd or SCRIPTS, timeout=300)


def example(name):
    return os.path.join(ROOT, "examples", name)


class HelpAndUsageNeedNoTorch(unittest.TestCase):
    def assertNoTorch(self, p):
        self.assertIn("torch imported: False", p.stderr)

    def test_help_lists_the_exit_codes(self):
        for entry in ("module", "script"):
            p = run_checker(["--help"], entry)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNoTorch(p)
            self.assertIn("--seed", p.stdout)
            self.assertIn("exit codes:", p.stdout)
            for line in ("0  every output Passed", "1  a numerics mismatch", "2  bad usage",
                         "3  kiln refused a spec (kiln validate exited 2, bad input, or 5, not supported"):
                self.assertIn(line, p.stdout, entry)

    def test_argument_errors_exit_2_naming_the_argument(self):
        cases = [([], "the following arguments are required: specs"),
                 (["--seed", "-1", "x.json"], "argument --seed: expected a whole number from 0 to "
                  "18446744073709551615, got '-1'"),
                 (["--seed", "1.5", "x.json"], "argument --seed: expected a whole number"),
                 (["--seed", str(1 << 64), "x.json"], "argument --seed: expected a whole number"),
                 (["--compute", "fp16", "x.json"], "argument --compute: invalid choice: 'fp16'"),
                 (["--tolerance-scale", "nan", "x.json"], "argument --tolerance-scale: expected a finite number > 0"),
                 (["--timeout", "0", "x.json"], "argument --timeout: expected a finite number > 0"),
                 (["--timeout", "nan", "x.json"], "argument --timeout: expected a finite number > 0"),
                 (["--timeout", "-5", "x.json"], "argument --timeout: expected a finite number > 0"),
                 (["--kiln", "/nonexistent/kiln", "x.json"], "kiln binary '/nonexistent/kiln' not found")]
        if HAVE_KILN:
            cases.append((["--kiln", KILN, os.path.dirname(os.path.abspath(__file__))], "is a folder, not a spec file"))
        for args, says in cases:
            p = run_checker(args)
            self.assertEqual(p.returncode, command.EXIT_USAGE, f"{args}: {p.stderr}")
            self.assertIn(says, p.stderr, args)
            self.assertNoTorch(p)

    @unittest.skipUnless(HAVE_KILN, f"no kiln binary at {KILN} (set KILN)")
    def test_a_missing_spec_or_no_torch_is_bad_usage_and_nothing_is_written(self):
        with tempfile.TemporaryDirectory(prefix="torch_check_cmd_") as tmp:
            out = os.path.join(tmp, "out")
            p = run_checker(["--kiln", KILN, "--out", out, os.path.join(tmp, "missing.json")])
            self.assertEqual(p.returncode, command.EXIT_USAGE, p.stderr)
            self.assertIn(f"spec '{os.path.join(tmp, 'missing.json')}' not found", p.stderr)
            p = run_checker(["--kiln", KILN, "--out", out, example("small/conv_bias_relu.json")])
            self.assertEqual(p.returncode, command.EXIT_USAGE, p.stderr)
            self.assertIn("torch_check needs PyTorch", p.stderr)
            self.assertFalse(os.path.exists(out))

    def test_seed_takes_kilns_range(self):
        self.assertEqual(command.seed_value("0"), 0)
        self.assertEqual(command.seed_value("010"), 10)
        self.assertEqual(command.seed_value(str((1 << 64) - 1)), (1 << 64) - 1)
        for bad in ("-1", "+1", "0x10", "1e3", "1_000", "", " 1", "\u00b2"):
            with self.assertRaises(argparse.ArgumentTypeError, msg=bad):
                command.seed_value(bad)


class ARefusedSpecHasItsOwnExitCode(unittest.TestCase):
    def test_exit_code_order(self):
        passed = {"verdict": "Passed"}
        refused = {"verdict": "Failed", "refused": True}
        failed = {"verdict": "Failed", "refused": False}
        incorrect = {"verdict": "Incorrect"}
        self.assertEqual(command.exit_code([passed], []), command.EXIT_OK)
        self.assertEqual(command.exit_code([passed, refused], []), command.EXIT_REFUSED)
        self.assertEqual(command.exit_code([refused, incorrect], []), command.EXIT_MISMATCH)
        self.assertEqual(command.exit_code([refused, failed], []), command.EXIT_MISMATCH)
        self.assertEqual(command.exit_code([passed, refused], ["fp16 0x7c01"]), command.EXIT_MISMATCH)
        self.assertEqual(len({command.EXIT_OK, command.EXIT_MISMATCH, command.EXIT_USAGE, command.EXIT_REFUSED}), 4)

    def test_which_kiln_exits_are_refusals(self):
        self.assertTrue(NormalizedError("m", 2).refused)
        self.assertTrue(NormalizedError("m", 5).refused)
        for code in (None, 1, 3, 10):
            self.assertFalse(NormalizedError("m", code).refused, code)

    @unittest.skipUnless(HAVE_KILN, f"no kiln binary at {KILN} (set KILN)")
    def test_a_refused_spec_is_a_refused_row_without_torch(self):
        with tempfile.TemporaryDirectory(prefix="torch_check_cmd_") as tmp:
            bad = os.path.join(tmp, "bad.json")
            with open(bad, "w", encoding="utf-8") as f:
                f.write(BAD_SPEC)
            code = (f"import sys, json; sys.modules['torch'] = None; sys.path.insert(0, {SCRIPTS!r})\n"
                    "from torch_check.__main__ import check_spec, exit_code, parse_args\n"
                    f"args = parse_args(['--kiln', {KILN!r}, {bad!r}]); args.kiln = {KILN!r}\n"
                    f"rows, rec = check_spec(args, {bad!r}, None)\n"
                    "print(json.dumps({'rows': rows, 'rec': rec, 'exit': exit_code(rows, [])}))")
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            got = json.loads(p.stdout)
        row = got["rows"][0]
        self.assertEqual((row["verdict"], row["refused"], row["kiln_exit_code"]), ("Failed", True, 2))
        self.assertIn("kiln refused the spec (exit 2, bad input or usage): ", row["reason"])
        self.assertIn("node 'n': unknown op 'nope'", row["reason"])
        self.assertEqual(got["rec"]["kiln_validate_exit_code"], 2)
        self.assertEqual(got["exit"], command.EXIT_REFUSED)


@unittest.skipUnless(HAVE_KILN and importlib.util.find_spec("torch") is not None,
                     "needs PyTorch and a kiln binary (set KILN)")
class EndToEndWithTorch(unittest.TestCase):
    def test_a_refused_spec_beside_a_passing_one_exits_3(self):
        with tempfile.TemporaryDirectory(prefix="torch_check_cmd_") as tmp:
            bad = os.path.join(tmp, "bad.json")
            with open(bad, "w", encoding="utf-8") as f:
                f.write(BAD_SPEC)
            out = os.path.join(tmp, "out")
            p = subprocess.run([sys.executable, "-m", "torch_check", "--kiln", KILN, "--skip-kiln", "--device", "cpu",
                                "--out", out, example("small/conv_bias_relu.json"), bad],
                               capture_output=True, text=True, cwd=SCRIPTS, timeout=600)
            self.assertEqual(p.returncode, command.EXIT_REFUSED, p.stdout + p.stderr)
            with open(os.path.join(out, "torch_check.json"), encoding="utf-8") as f:
                summary = json.load(f)["summary"]
            self.assertEqual(summary["refused_specs"], [bad])
            self.assertEqual(summary["exit_code"], command.EXIT_REFUSED)


if __name__ == "__main__":
    unittest.main()
