"""Host tier, no PyTorch: the checker reads `kiln validate --normalized` (normalized.py) as Kiln writes it.

    KILN=build/kiln python3 -m unittest -v torch_check.test_normalized      (from scripts/)

Runs the built kiln on example specs and checks what the checker's objects hold; that importing the package
and its reader needs no torch; that every module compiles; and that the checker keeps no spec parser.
"""

import ast
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))

from torch_check import normalized  # noqa: E402
from torch_check.normalized import Graph, NormalizedError, normalize  # noqa: E402

KILN = os.environ.get("KILN", os.path.join(ROOT, "build", "kiln"))


def example(name):
    return os.path.join(ROOT, "examples", name)


@unittest.skipUnless(os.access(KILN, os.X_OK), f"no kiln binary at {KILN} (set KILN)")
class ReadsKilnsNormalizedGraph(unittest.TestCase):
    def test_conv_bias_relu(self):
        g, text = normalize(KILN, example("small/conv_bias_relu.json"))
        self.assertEqual(json.loads(text)["version"], normalized.VERSION)
        self.assertEqual(g.name, "conv_bias_relu_small")
        self.assertEqual(g.dynamic, {"batch": 2})
        self.assertEqual([n.name for n in g.nodes], ["conv", "add_bias", "relu"])
        x = g.tensors[g.nodes[0].inputs[0]]
        self.assertEqual((x.name, x.dims, x.strides, x.dtype), ("x", [2, 8, 8, 8], [512, 1, 64, 8], "fp16"))
        self.assertEqual(x.symbols, ["batch", None, None, None])
        self.assertEqual((x.is_input, x.is_output, x.by_value, x.draw, x.elements), (True, False, False, (-1.0, 1.0), 1024))
        conv = g.nodes[0]
        self.assertEqual((conv.kind, conv.mode, conv.op, conv.compute_dtype), ("conv_fprop", None, "conv_fprop", "fp32"))
        self.assertEqual(conv.input_roles, ["x", "w"])
        self.assertEqual(conv.attrs, {"pre_padding": [1, 1], "post_padding": [1, 1], "stride": [1, 1],
                                      "dilation": [1, 1], "groups": 1})
        self.assertEqual(conv.label(), "node 'conv' (conv_fprop)")
        mid = g.tensors[conv.output]
        self.assertEqual((mid.name, mid.dims, mid.dtype, mid.is_virtual), ("conv_out", [2, 16, 8, 8], "fp32", True))
        self.assertEqual(g.nodes[1].mode, "bias_add")
        self.assertEqual(g.tensors[g.nodes[1].inputs[1]].draw, (-0.5, 0.5))
        self.assertEqual([t.name for t in g.output_tensors()], ["y"])
        self.assertEqual([t.name for t in g.drawn_inputs()], ["x", "w", "bias"])
        self.assertEqual(g.outputs[0].reduction_length, 72)

    def test_tolerance_choice_and_scale(self):
        g, _ = normalize(KILN, example("small/matmul_bias_gelu.json"))
        out = g.outputs[0]
        bound = out.tolerance_for(True, False, 1.0)
        self.assertEqual(bound, out.tolerance["bound"])
        self.assertGreater(bound["acc_coeff"], 0.0)
        self.assertEqual(out.tolerance_for(False, True, 1.0), out.tolerance["legacy_tf32"])
        scaled = out.tolerance_for(True, False, 2.0)
        for k in ("atol", "rtol", "acc_coeff"):
            self.assertEqual(scaled[k], 2.0 * bound[k])
        for k in ("nmse_max", "rel_floor", "acc_nmse_coeff"):
            self.assertEqual(scaled[k], bound[k])
        self.assertEqual(out.tolerance["bound"]["acc_coeff"], bound["acc_coeff"])  # a copy was scaled

    def test_every_example_reads(self):
        folders = [os.path.join(ROOT, "examples"), os.path.join(ROOT, "examples", "small")]
        specs = [os.path.join(f, s) for f in folders for s in sorted(os.listdir(f)) if s.endswith(".json")]
        self.assertGreaterEqual(len(specs), 18)
        for spec in specs:
            g, _ = normalize(KILN, spec)
            written = {n.output for n in g.nodes}
            seen = set()
            for n in g.nodes:  # topological: every input is a graph input or written earlier
                for t in n.inputs:
                    self.assertTrue(g.tensors[t].is_input or t in seen, f"{spec}: {n.label()}")
                seen.add(n.output)
            for t in g.tensors:
                self.assertEqual(t.is_input, t.index not in written)
                self.assertEqual(len(t.dims), len(t.strides))
                self.assertEqual(t.draw is not None, t.is_input and not t.by_value)
            self.assertTrue(g.outputs)

    def test_sdpa_and_norms(self):
        g, _ = normalize(KILN, example("small/sdpa_fwd.json"))
        self.assertEqual(g.nodes[0].attrs, {"causal": True, "attn_scale": 0.25, "attn_scale_given": True,
                                            "left_bound": None, "right_bound": 0, "diagonal_shift": 0,
                                            "diagonal_alignment": "top_left", "padding_mask": False,
                                            "paged_kv": False, "ragged": False, "keys": 32})
        g, _ = normalize(KILN, example("small/rms_norm.json"))
        self.assertEqual(g.nodes[0].kind, "rms_norm")
        self.assertEqual(g.nodes[0].attrs["epsilon"], 1e-5)
        self.assertEqual(g.tensors[g.nodes[0].inputs[1]].draw, (0.5, 1.5))

    def test_multi_output_nodes_are_refused_by_name(self):
        """An sdpa with its statistics (two outputs) has no PyTorch path in this checker: refused naming the node,
        never checked as a one-output node."""
        spec = {"name": "s", "io_dtype": "bf16",
                "tensors": {"q": {"dims": [1, 2, 16, 64]}, "k": {"dims": [1, 2, 16, 64]},
                            "v": {"dims": [1, 2, 16, 64]}, "lse": {"dtype": "float32"}},
                "nodes": [{"name": "attn", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o", "lse"]}],
                "outputs": ["o", "lse"]}
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"torch_check_stats_{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        try:
            with self.assertRaises(NormalizedError) as e:
                normalize(KILN, path)
            self.assertIn("node 'attn' (sdpa): 2 outputs", str(e.exception))
        finally:
            os.remove(path)

    def test_a_refused_spec_is_kilns_message(self):
        bad = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"torch_check_bad_{os.getpid()}.json")
        with open(bad, "w", encoding="utf-8") as f:
            f.write('{"tensors": {"x": {"dims": [2]}}, "nodes": [{"name": "n", "op": "nope", "inputs": ["x"], '
                    '"outputs": ["y"]}], "outputs": ["y"]}')
        try:
            with self.assertRaises(NormalizedError) as e:
                normalize(KILN, bad)
            self.assertIn("node 'n': unknown op 'nope'", str(e.exception))
            plain = subprocess.run([KILN, "validate", bad], capture_output=True, text=True)
            self.assertEqual(plain.returncode, 2)
            self.assertEqual(str(e.exception), normalized.last_line(plain.stderr))
        finally:
            os.remove(bad)


class ReaderRefusesWhatItCannotRead(unittest.TestCase):
    def test_other_format_or_version(self):
        with self.assertRaises(NormalizedError):
            Graph({"format": "something-else", "version": 1})
        with self.assertRaisesRegex(NormalizedError, "version 2, this checker reads 1"):
            Graph({"format": normalized.FORMAT, "version": 2})
        with self.assertRaisesRegex(NormalizedError, "malformed"):
            Graph({"format": normalized.FORMAT, "version": 1, "name": "g", "dynamic": {}, "tensors": [{}]})


class PackageShape(unittest.TestCase):
    def test_reader_needs_no_torch(self):
        code = "import sys; sys.path.insert(0, %r); import torch_check.normalized; print('torch' in sys.modules)"
        p = subprocess.run([sys.executable, "-c", code % os.path.dirname(HERE)], capture_output=True, text=True)
        self.assertEqual(p.stdout.strip(), "False", p.stderr)

    def test_modules_compile_and_keep_no_spec_parser(self):
        names = set()
        for f in sorted(os.listdir(HERE)) + ["../torch_check.py"]:
            if f.endswith(".py"):
                with open(os.path.join(HERE, f), encoding="utf-8") as src:
                    tree = ast.parse(src.read(), f)  # a syntax error fails here, torch or not
                names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        for gone in ("parse_spec", "infer_node", "validate", "topological_order", "conv_out_extent",
                     "broadcast_dims", "node_reduction_length", "accumulation_into", "input_ranges",
                     "default_tolerance", "output_tolerance"):
            self.assertNotIn(gone, names)


if __name__ == "__main__":
    unittest.main()
