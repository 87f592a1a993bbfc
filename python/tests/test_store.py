"""The store from Python, on real SQLite stores made by the library itself (deviceless compile), compared with
what the CLI lists; and the errors a store meets."""
from __future__ import annotations

import json
import subprocess

import pytest

import kiln


@pytest.fixture
def compiled_store(root, tmp_path):
    db = tmp_path / "plans.db"
    parts = kiln.compile(root / "examples" / "small" / "conv_bias_relu.json", root / "profiles" / "h200.json", db)
    assert [p["outcome"] for p in parts] == ["compiled"], parts
    return db, parts


def test_compile_then_ls(compiled_store, root):
    db, parts = compiled_store
    with kiln.store.open(db, read_only=True) as s:
        rows = s.ls()
    assert len(rows) == 1
    r = rows[0]
    sig = kiln.signature(root / "examples" / "small" / "conv_bias_relu.json")
    assert (r["structure"], r["shape_key"]) == (sig.structure, sig.shape_key)
    assert r["config"] == parts[0]["config"] and r["tuned"] is False and r["gpu"] == "NVIDIA H200"
    assert r["problem"] == "" and r["plan_bytes"] > 0


def test_ls_matches_the_cli(compiled_store, kiln_cli):
    db, _ = compiled_store
    out = subprocess.run([kiln_cli, "plans", "ls", "--json", "--store", str(db)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    with kiln.store.open(db, read_only=True) as s:
        mine = s.ls()
    assert [(r["structure"], r["shape_key"], r["fingerprint_key"]) for r in mine] == [
        (r["structure_sig"], r["shape_key"], r["fingerprint_key"]) for r in cli]


def test_filters_verify_export_import_remove(compiled_store, tmp_path):
    db, _ = compiled_store
    with kiln.store.open(db) as s:
        structure = s.ls()[0]["structure"]
        assert len(s.ls(structure=structure[:8])) == 1
        assert s.ls(structure="ffff") == []
        assert s.ls(tuned_only=True) == []
        v = s.verify()
        assert v["checked"] == 1 and v["ok"] == 1 and v["problems"] == []
        assert v["other_states"] == {"checked": 0, "ok": 0, "problems": []}  # as `kiln plans verify --json` says
        assert v["kernel_caches"]["problems"] == []
        bundle = tmp_path / "b.kilnb"
        assert s.export_bundle(bundle)["records"] == 1
        with pytest.raises(kiln.BadInput):
            s.export_bundle(bundle)  # exists
        with pytest.raises(kiln.BadInput):
            s.remove()  # an empty filter needs all=True
        assert s.remove(structure=structure) == 1
        assert s.ls() == []
        assert s.import_bundle(bundle)["imported"] == 1
        assert len(s.ls()) == 1
        assert s.winner_changes() == []


def test_a_closed_store_says_so(tmp_path):
    s = kiln.store.open(tmp_path / "x.db")
    s.close()
    with pytest.raises(kiln.BadInput, match="closed"):
        s.ls()


def test_a_file_that_is_not_a_store(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(kiln.Corruption) as e:
        kiln.store.open(junk)
    assert e.value.exit_code == 4


def test_read_only_open_of_a_missing_store(tmp_path):
    with pytest.raises(kiln.NotFound):
        kiln.store.open(tmp_path / "none.db", read_only=True)


def test_a_truncated_bundle_imports_nothing(compiled_store, tmp_path):
    db, _ = compiled_store
    bundle = tmp_path / "b.kilnb"
    with kiln.store.open(db) as s:
        s.export_bundle(bundle)
    data = bundle.read_bytes()
    bundle.write_bytes(data[: len(data) // 2])
    with kiln.store.open(tmp_path / "other.db") as s:
        with pytest.raises(kiln.KilnError) as e:
            s.import_bundle(bundle)
        assert e.value.code in ("Corruption", "InvalidArgument")
        assert s.ls() == []


def test_unparsable_server_location_is_bad_input_without_the_password():
    for where in ("postgresql://kiln:s3cret@host:abc/db", "postgresql://kiln:s3cret@[::1/db"):
        with pytest.raises(kiln.BadInput) as e:
            kiln.store.open(where)
        assert "s3cret" not in str(e.value) and e.value.exit_code == 2


def test_closing_while_another_thread_uses_the_store(compiled_store):
    import threading

    db, _ = compiled_store
    for _ in range(5):
        s = kiln.store.open(db)
        errors = []

        def use():
            for _ in range(200):
                try:
                    s.verify()
                except kiln.BadInput as e:  # closed meanwhile: the only error allowed
                    assert "closed" in e.message
                    return
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))
                    return

        t = threading.Thread(target=use)
        t.start()
        s.close()
        t.join()
        assert errors == []
    with pytest.raises(kiln.BadInput, match="closed"):
        s.ls()


def test_mirror_is_for_server_stores_only(tmp_path):
    with pytest.raises(kiln.BadInput, match="mirror"):
        kiln.store.open(tmp_path / "a.db", mirror=str(tmp_path / "m.db"))


def test_compile_needs_a_store(root):
    with pytest.raises(kiln.BadInput, match="store: empty"):
        kiln.compile(root / "examples" / "small" / "conv_bias_relu.json", root / "profiles" / "h200.json", "")
    with pytest.raises(kiln.BadInput, match="NUL"):
        kiln.store.open("a.db\x00zzz")


def test_plan_states_from_python_match_the_cli(compiled_store, kiln_cli):
    db, parts = compiled_store
    with kiln.store.open(db) as s:
        row = s.ls()[0]
        key = (row["structure"], row["shape_key"], row["fingerprint_key"])
        assert s.candidates() == []
        history = s.history(*key)
        assert [(h["config"], h["from"], h["to"]) for h in history] == [(row["config"], "", "active")]
        with pytest.raises(kiln.NoPlan, match="no retired plan"):
            s.rollback(*key)
        with pytest.raises(kiln.NotFound):
            s.promote(*key, "eng999")
        with pytest.raises(kiln.NoPlan, match="is active"):
            s.reject(*key, row["config"])
        with pytest.raises(kiln.BadInput, match="plan state"):
            s._s.transition(*key, row["config"], "live", "x")
    out = subprocess.run([kiln_cli, "plans", "history", "--json", "--store", str(db), "--structure", key[0]],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    assert [(h["config"], h["from"], h["to"]) for h in cli["history"]] == [(h["config"], h["from"], h["to"])
                                                                         for h in history]
