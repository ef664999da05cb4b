"""Graph mode's compile cache: what ``torch.compile(backend="tpu")`` builds
for a graph is kept, so each graph is compiled once per host (and once per
cluster with a shared root).

The entry of a graph is AOTAutograd's bundled result (forward and backward
:class:`vtpu.compiler.Program`, the runtime metadata and wrappers), keyed by
AOTAutograd's own key of the Dynamo graph (the graph, input shapes, dtypes
and strides, constants, grad and autocast state, config), plus vtpu's build
fingerprint (vtpu, torch and Python versions, the compiler's sources, the
ops vtpu runs natively), the chip and the ISA path. The entries live in the C
runtime's three tiers (runtime/include/vtpu/cache.h):

- tier 1: this process;
- tier 2: ``$VTPU_CACHE_DIR/<name>/<fingerprint>`` (``VTPU_CACHE_DIR``
  defaults to ``$XDG_CACHE_HOME/vtpu``, else ``~/.cache/vtpu``), shared by
  the host's processes and restarts; ``<name>`` is
  ``TORCH_TPU_TIER2_COMPILATION_CACHE`` (default ``default``;
  ``disabled`` turns tier 2 off);
- tier 3: ``$TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT/<fingerprint>``, a root
  shared across hosts, when set.

A process that misses a key takes its per-key file lock before it compiles,
so processes compiling the same graph at once compile it once. Entries are
pickles: the cache directories must be as trusted as the code that runs.
``torch.compiler.config.force_disable_caches`` turns the whole cache off.
"""

import functools
import hashlib
import os
import pickle
import sys
import threading
import warnings

import torch

from . import _C

__all__ = ["stats", "clear", "directories"]

_state = threading.local()  # .active: a vtpu compile runs on this thread; .held: its locks by key
_compilations = 0
_configured = None
_warned = False
_warned_lock = False


def directories() -> tuple:
    """(tier 2, tier 3) directories the environment asks for ("" when off)."""
    name = os.environ.get("TORCH_TPU_TIER2_COMPILATION_CACHE", "default") or "default"
    if name in (".", "..") or "/" in name:
        raise ValueError(f"TORCH_TPU_TIER2_COMPILATION_CACHE={name!r}: expected a name (or 'disabled'), not a path")
    root = os.environ.get("VTPU_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vtpu"
    )
    tier2 = "" if name == "disabled" else os.path.join(root, name, fingerprint())
    shared = os.environ.get("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", "")
    tier3 = os.path.join(shared, fingerprint()) if shared else ""
    return tier2, tier3


@functools.cache
def fingerprint() -> str:
    """What every entry of this build shares, and hosts with the same build
    share: the versions, the compiler's sources and the set of ops vtpu
    runs natively (what AOTAutograd decomposes depends on it)."""
    import vtpu

    from .compiler import decompositions

    h = hashlib.sha256()
    h.update(f"{vtpu.__version__}|{torch.__version__}|{sys.version_info[:2]}|{sys.platform}".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("compiler.py", "compile_cache.py"):
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    h.update("|".join(sorted(str(op) for op in decompositions())).encode())
    return h.hexdigest()[:16]


def _configure() -> None:
    global _configured
    dirs = directories()
    if dirs != _configured:
        _C._cache_configure(*dirs)
        _configured = dirs


@functools.cache
def _device_key() -> str:
    return f"{_C._chip_info()['name']}|{_C._isa_info()['path']}"


def _key(aot_key: str) -> str:
    return hashlib.sha256(f"{aot_key}|{fingerprint()}|{_device_key()}".encode()).hexdigest()


def _load(key: str, args):
    """(entry, its bytes) from the tiers, or None."""
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw

    data, _tier = _C._cache_get(key)
    if data is None:
        return None
    try:
        entry = pickle.loads(data)
    except Exception as e:  # noqa: BLE001 - an entry this build cannot read is a miss
        warnings.warn(f"vtpu: compile cache entry {key[:12]} cannot be read ({e}); compiling again", stacklevel=2)
        return None
    if entry.guards_expr:  # symbolic sizes: the entry holds for the sizes its guards allow
        hints = [guarding_hint_or_throw(s) for s in AOTAutogradCache._filter_backed_symints(args)]
        if not AOTAutogradCache.evaluate_guards(entry.guards_expr, hints):
            return None
    return entry, data


def _lookup(original):
    def lookup(key, local, remote, args, cache_info, aot_config):
        if not getattr(_state, "active", False):
            return original(key, local, remote, args, cache_info, aot_config)
        ours = _key(key)
        if ours not in _state.held:  # (a lock this thread holds would wait for itself)
            _state.held[ours] = _take_lock(ours)  # a process compiling it now finishes first
        found = _load(ours, args)
        if found is not None:
            _release(ours)
        return found

    return staticmethod(lookup)


def _save(original):
    def save(key, entry, remote):
        global _warned
        if not getattr(_state, "active", False):
            return original(key, entry, remote)
        try:
            from torch.utils._python_dispatch import _disable_current_modes

            entry.pre_save()
            with _disable_current_modes():
                data = pickle.dumps(entry)
        except Exception as e:  # noqa: BLE001 - the graph runs, uncached
            warnings.warn(f"vtpu: a compiled graph cannot be cached ({e})", stacklevel=2)
            return None
        ours = _key(key)
        compile_ns = entry.forward_time_taken_ns + entry.backward_time_taken_ns
        refused = _C._cache_put(ours, data, compile_ns // 1000)
        if refused and not _warned:
            _warned = True
            warnings.warn(f"vtpu: {refused}; compiling without that cache", stacklevel=2)
        _release(ours)
        return None

    return staticmethod(save)


LOCK_WAIT_S = 600.0  # how long a compile waits for another process's compile of its graph


def _take_lock(key: str) -> int:
    """The key's lock, once the process compiling it (if any) is done; after
    LOCK_WAIT_S, -1 and a warning: this process compiles the graph too."""
    global _warned_lock
    waited = 0.0
    while True:
        step = min(0.2, max(LOCK_WAIT_S - waited, 0.0))
        handle = _C._cache_lock(key, int(step * 1000))
        if handle is not None:
            return handle
        waited += step
        if waited >= LOCK_WAIT_S:
            if not _warned_lock:
                _warned_lock = True
                warnings.warn(f"vtpu: another process has been compiling this graph for {LOCK_WAIT_S:.0f} s; "
                              "compiling it here too", stacklevel=3)
            return -1


def _release(key=None) -> None:
    """Unlocks key (None: every key this thread holds)."""
    held = getattr(_state, "held", {})
    for k in [key] if key is not None else list(held):
        if k in held:
            _C._cache_unlock(held.pop(k))


@functools.cache
def install() -> None:
    """Route AOTAutograd's cache lookups and saves of vtpu's compiles to the
    tiers (other backends' compiles keep AOTAutograd's own cache)."""
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

    AOTAutogradCache._lookup = _lookup(AOTAutogradCache._lookup)
    AOTAutogradCache.save = _save(AOTAutogradCache.save)


class compiling:
    """Context of one vtpu compile: its cache lookups and saves go to the
    tiers, with AOTAutograd bundling the compiled Programs into the entry
    and compiling the backward with the forward (so the whole entry is
    saved while this process holds the key's lock)."""

    def __enter__(self):
        install()
        _configure()
        self._patch = torch._functorch.config.patch(bundled_autograd_cache=True, force_non_lazy_backward_lowering=True)
        self._patch.__enter__()
        self._outer = getattr(_state, "active", False)
        _state.active = True
        if not self._outer:
            _state.held = {}
        return self

    def __exit__(self, *exc):
        if not self._outer:
            _state.active = False
            _release()  # a compile that failed or was not cacheable
        self._patch.__exit__(*exc)
        return False


def compiled() -> None:
    """Counts one graph compiled (not loaded)."""
    global _compilations
    _compilations += 1


def stats() -> dict:
    """TorchTPU's ``_get_cache_stats()``: ``num_cache_reqs``,
    ``num_cache_hits``, ``per_entry_stats`` (per key: ``read_count``,
    ``compilation_duration`` in µs, ``last_read`` in µs since the epoch), and
    vtpu's hits per tier, entries discarded by their checks, refused writes
    and ``num_compilations`` (graphs this process compiled); generated
    code of fused groups: ``num_codegen_compiles`` (objects the C compiler
    built in this process), ``num_codegen_loads`` (taken from the cache),
    ``num_codegen_failures`` (compiles that failed: those groups run on
    the interpreter), ``num_codegen_runs`` (group commands run on
    generated code) and ``codegen_compile_duration`` (µs)."""
    s = _C._cache_stats()
    s["num_compilations"] = _compilations
    return s


def clear() -> None:
    """TorchTPU's ``_clear_cache()``: empties tier 1 and this host's tier 2
    (tier 3 is shared: left alone) and resets the statistics."""
    global _compilations
    _configure()
    _C._cache_clear(True)
    _compilations = 0
