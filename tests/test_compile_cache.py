"""Graph mode's compile cache (vtpu.compile_cache over runtime's cache.c):
a second process loads what the first compiled, processes compiling at once
compile once, damaged entries are rebuilt, caches that cannot be written
degrade with one warning, and the environment picks the tiers. Each
process is tests/compile_cache_worker.py: its compiled steps must match its
eager steps, and every process's compiled losses must be the same.

Besides each graph's entry, the cache holds the shared objects of the
generated code of the programs' fused groups (keys "cg...", the AdamW
step's chains here): a second process loads them and never runs the C
compiler.

The checks of the entry files themselves (checksums, truncation, atomic
writes, locks) are runtime/tests/test_cache.c's."""

import json
import os
import resource
import signal
import subprocess
import sys

import pytest
import torch

import vtpu

if os.environ.get("TPU_DEFER_AND_FUSE", "0") not in ("", "0"):
    pytest.skip("compiled programs run in DeferAndFuse in either pass", allow_module_level=True)

WORKER = os.path.join(os.path.dirname(__file__), "compile_cache_worker.py")
GRAPHS = 2  # the loss (forward and backward) and the optimizer step
PROGRAMS = 3  # forward, backward, optimizer step


def start(cache_dir, preexec_fn=None, **env):
    full = dict(os.environ, VTPU_CACHE_DIR=str(cache_dir), **{k: str(v) for k, v in env.items()})
    return subprocess.Popen([sys.executable, WORKER], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec_fn)


def finish(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    torch.testing.assert_close(result["compiled"], result["eager"])
    return result


def run(cache_dir, preexec_fn=None, **env):
    return finish(start(cache_dir, preexec_fn, **env))


def entries(root):
    """The graphs' entries."""
    return sorted(p for p in root.rglob("*.bin") if not p.name.startswith("cg"))


def objects(root):
    """The generated code's entries."""
    return sorted(p for p in root.rglob("cg*.bin"))


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """A first process on an empty cache, and its cache directory."""
    root = tmp_path_factory.mktemp("cold")
    return run(root), root


def test_first_process_compiles_and_stores_each_graph(cold):
    result, root = cold
    s = result["stats"]
    assert s["num_codegen_compiles"] > 0 and s["num_codegen_failures"] == 0 and s["num_codegen_runs"] > 0
    assert s["num_cache_reqs"] == GRAPHS + s["num_codegen_compiles"] and s["num_cache_hits"] == 0
    assert s["num_compilations"] == PROGRAMS
    assert len(entries(root)) == GRAPHS
    assert len(objects(root)) == s["num_codegen_compiles"]
    assert result["warnings"] == []


def test_second_process_loads_every_graph_from_tier2(cold):
    first, root = cold
    result = run(root)
    s = result["stats"]
    # (the first call of a cold process may fuse one group more: the
    # compile holds some of its buffers alive)
    loads = s["num_codegen_loads"]
    assert 0 < loads <= first["stats"]["num_codegen_compiles"] and s["num_codegen_runs"] > 0
    want = GRAPHS + loads
    assert s["num_cache_reqs"] == want and s["num_cache_hits"] == want and s["num_tier2_hits"] == want
    assert s["num_compilations"] == 0  # nothing was compiled
    assert s["num_codegen_compiles"] == 0 and s["num_codegen_failures"] == 0  # the C compiler never ran
    assert result["compiled"] == first["compiled"]  # the same programs: the same results
    per_entry = s["per_entry_stats"]
    assert len(per_entry) == want
    for e in per_entry.values():
        assert e["read_count"] == 1 and e["compilation_duration"] > 0 and e["last_read"] > 0


def test_processes_compiling_at_once_compile_each_graph_once(tmp_path):
    barrier = tmp_path / "go"
    procs = [start(tmp_path / "cache", WORKER_BARRIER=barrier) for _ in range(2)]
    barrier.touch()
    a, b = [finish(p) for p in procs]
    sa, sb = a["stats"], b["stats"]
    assert sa["num_compilations"] + sb["num_compilations"] == PROGRAMS
    made = len(objects(tmp_path / "cache"))  # each object compiled by one of them
    assert made > 0 and sa["num_codegen_compiles"] + sb["num_codegen_compiles"] == made
    assert sa["num_cache_hits"] + sb["num_cache_hits"] == GRAPHS + sa["num_codegen_loads"] + sb["num_codegen_loads"]
    assert a["compiled"] == b["compiled"]


def test_damaged_entries_are_discarded_and_rebuilt(cold, tmp_path):
    first, root = cold
    cache = tmp_path / "cache"
    run(cache)
    used = [k for k in run(cache)["stats"]["per_entry_stats"] if k.startswith("cg")]  # what a warm process loads
    damaged = entries(cache)
    assert len(damaged) == GRAPHS
    raw = bytearray(damaged[0].read_bytes())
    raw[len(raw) // 2] ^= 0x40  # one bit inside the pickle
    damaged[0].write_bytes(raw)
    size = damaged[1].stat().st_size
    os.truncate(damaged[1], size // 3)
    (obj,) = [p for p in objects(cache) if p.name == used[0] + ".bin"]
    raw = bytearray(obj.read_bytes())
    raw[-100] ^= 0x01  # one bit inside the shared object: never loaded
    obj.write_bytes(raw)
    result = run(cache)
    s = result["stats"]
    assert s["num_discarded_entries"] == GRAPHS + 1 and s["num_cache_hits"] == s["num_codegen_loads"]
    assert s["num_compilations"] == PROGRAMS
    assert s["num_codegen_compiles"] == 1  # the damaged object, and only it
    assert result["compiled"] == first["compiled"]
    again = run(cache)["stats"]  # rebuilt, good again
    assert again["num_cache_hits"] == GRAPHS + len(used) and again["num_compilations"] == 0
    assert again["num_codegen_compiles"] == 0


def test_unwritable_cache_directory_compiles_without_it_and_warns_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run(blocker / "cache")  # a directory that cannot be made
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "cannot write" in result["warnings"][0] and "compiling without that cache" in result["warnings"][0]
    s = result["stats"]
    assert s["num_compilations"] == PROGRAMS and s["num_write_errors"] >= 1


def _small_files():
    """The child may write no file over 4 KiB: a full disk, for the cache's
    entries (the writes fail part-way: EFBIG, as ENOSPC would)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 10, 4 << 10))


def test_full_cache_directory_compiles_without_it_and_warns_once(tmp_path):
    result = run(tmp_path / "cache", preexec_fn=_small_files)
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "File too large" in result["warnings"][0]
    assert result["stats"]["num_compilations"] == PROGRAMS
    assert not list((tmp_path / "cache").rglob("*.tmp"))  # no partial file stays


def test_tier2_name_and_disabled(tmp_path):
    run(tmp_path, TORCH_TPU_TIER2_COMPILATION_CACHE="team")
    assert len(entries(tmp_path / "team")) == GRAPHS
    result = run(tmp_path / "off", TORCH_TPU_TIER2_COMPILATION_CACHE="disabled")
    assert not (tmp_path / "off").exists()
    again = run(tmp_path / "off", TORCH_TPU_TIER2_COMPILATION_CACHE="disabled")
    assert again["stats"]["num_compilations"] == PROGRAMS  # nothing survived the process
    assert result["compiled"] == again["compiled"]


def test_tier3_root_serves_a_new_host(tmp_path):
    shared = tmp_path / "shared"
    first = run(tmp_path / "host_a", TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=shared)
    assert len(entries(shared)) == GRAPHS
    made = first["stats"]["num_codegen_compiles"]
    assert len(objects(shared)) == made
    result = run(tmp_path / "host_b", TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT=shared)
    s = result["stats"]
    assert s["num_tier3_hits"] == GRAPHS + s["num_codegen_loads"] and s["num_compilations"] == 0
    assert s["num_codegen_compiles"] == 0
    assert len(entries(tmp_path / "host_b")) == GRAPHS  # copied into the host's tier
    assert result["compiled"] == first["compiled"]


def test_other_dtype_is_another_entry(cold, tmp_path):
    _, root = cold
    result = run(root, WORKER_DTYPE="float64")
    assert result["stats"]["num_cache_hits"] == 0 and result["stats"]["num_compilations"] == PROGRAMS


def test_stats_and_clear_in_process():
    def f(x):
        return torch.sin(x) * 2 + 1

    x = torch.randn(64).to("tpu")
    torch.tpu._clear_cache()
    assert torch.tpu._get_cache_stats()["num_cache_reqs"] == 0
    want = f(x.cpu())
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x).cpu(), want)
    s = torch.tpu._get_cache_stats()
    assert s["num_cache_reqs"] == 1 and s["num_cache_hits"] == 0 and s["num_compilations"] == 1
    torch._dynamo.reset()  # Dynamo forgets; the cache does not
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x).cpu(), want)
    s = torch.tpu._get_cache_stats()
    assert s["num_cache_hits"] == 1 and s["num_tier1_hits"] == 1 and s["num_compilations"] == 1
    (entry,) = s["per_entry_stats"].values()
    assert entry["read_count"] == 1
    torch.tpu._clear_cache()
    torch._dynamo.reset()
    assert torch.tpu._get_cache_stats()["per_entry_stats"] == {}
    tier2, _ = vtpu.compile_cache.directories()
    assert not [n for n in os.listdir(tier2) if n.endswith(".bin")]
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x).cpu(), want)
    assert torch.tpu._get_cache_stats()["num_compilations"] == 1


def test_bad_tier2_name_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_TIER2_COMPILATION_CACHE", "../elsewhere")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="expected a name"):
        torch.compile(lambda x: x + 1, backend="tpu")(torch.ones(3).to("tpu"))
    monkeypatch.delenv("TORCH_TPU_TIER2_COMPILATION_CACHE")
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(lambda x: x + 1, backend="tpu")(torch.ones(3).to("tpu")).cpu(),
                               torch.full((3,), 2.0))


def test_lock_held_elsewhere_waits_then_compiles_with_a_warning(tmp_path, monkeypatch):
    """A process that holds a graph's lock too long (hung) delays another's
    compile by LOCK_WAIT_S at most; then it compiles unlocked, with a note."""
    from vtpu import _C, compile_cache

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, vtpu._C as C; C._cache_configure(sys.argv[1], ''); "
         "h = C._cache_lock('k' * 64, -1); print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(compile_cache, "LOCK_WAIT_S", 0.5)
        monkeypatch.setattr(compile_cache, "_warned_lock", False)
        _C._cache_configure(str(tmp_path), "")
        with pytest.warns(UserWarning, match="another process has been compiling this graph"):
            assert compile_cache._take_lock("k" * 64) == -1
        holder.kill()
        holder.wait()
        handle = compile_cache._take_lock("k" * 64)  # let go: taken at once
        assert handle >= 0
        _C._cache_unlock(handle)
    finally:
        holder.kill()
        compile_cache._configured = None  # the next compile configures the tiers again
