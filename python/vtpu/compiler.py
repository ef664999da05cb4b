"""Graph mode: the "tpu" backend of torch.compile.

``torch.compile(fn, backend="tpu")`` hands Dynamo's graph to AOTAutograd,
which traces forward and backward into ATen graphs. Ops vtpu runs natively
stay as they are; every other op is decomposed into core ATen ops (so a
graph never falls back to the CPU where a native op can do the work). Each
graph becomes a :class:`Program`: its ATen calls run in DeferAndFuse on the
device in force at the call, at the caller's precision, so chains of
elementwise ops and reductions run as fused groups and intermediates the
graph drops are never written to memory; nothing the graph touches goes
through autograd or Python modules at run time. Random ops draw from the
device generator, as the same ops in eager mode do.

The backend is found by name through the ``torch_dynamo_backends`` entry
point, so ``import torch`` does not import Dynamo. Plain ``torch.compile``
(Inductor) on "tpu" tensors is routed here with a one-time note (see
:func:`route_inductor`): Inductor has no code generator for the device.
"""

import copy
import functools
import operator
import time
import warnings

import torch
from torch._inductor.output_code import OutputCode

from . import _C, compile_cache
from .modes import EagerMode

__all__ = ["tpu", "Program", "decompositions"]


def _native(op) -> bool:
    """Whether vtpu has its own kernel for op (an OpOverload)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1")


@functools.cache
def decompositions() -> dict:
    """Core ATen decompositions of the aten ops vtpu has no kernel for.
    Only aten's: other namespaces join PyTorch's table when their modules
    are imported (torch.distributed's functional collectives, which
    torch._inductor imports, add c10d_functional's), so the table, and the
    cache's keys made from it, would depend on what the process imported."""
    from torch._decomp import core_aten_decompositions

    return {
        op: fn for op, fn in core_aten_decompositions().items() if op.namespace == "aten" and not _native(op)
    }


def _inplace_variant(op):
    """The in-place overload of a pointwise or foreach op with the same
    arguments (add.Tensor -> add_.Tensor), if vtpu runs it natively."""
    name = op.overloadpacket.__name__
    if name.endswith("_") or torch.Tag.nondeterministic_seeded in op.tags:
        return None
    if torch.Tag.pointwise not in op.tags and not name.startswith("_foreach_"):
        return None
    packet = getattr(torch.ops.aten, name + "_", None)
    inplace = getattr(packet, op._overloadname, None) if packet is not None else None
    if inplace is None or not _native(inplace):
        return None
    ins, outs = op._schema.arguments, inplace._schema.arguments
    if [a.name for a in ins] != [a.name for a in outs]:
        return None
    return inplace


def _aliases_input(node) -> bool:
    """Whether node's result may alias an input (a view op, say)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return node.op != "output"
    return any(r.alias_info is not None for r in node.target._schema.returns)


def _storage(node):
    """The memory node's value is in, as tracing saw it (None: not a tensor)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    v = node.meta.get("val")
    return StorageWeakRef(v.untyped_storage()) if isinstance(v, torch.Tensor) else None


def _sharing(nodes) -> dict:
    """The values in each memory, as tracing saw it: also the aliases an op
    makes without saying so in its schema (_unsafe_view)."""
    groups = {}
    for m in nodes:
        key = _storage(m)
        if key is not None:
            groups.setdefault(key, []).append(m)
    return groups


def _others_in_memory(x, sharing):
    """The other values in x's memory (sharing: _sharing of the graph),
    aliases no schema names included; None when x's memory is unknown."""
    key = _storage(x)
    return None if key is None else [m for m in sharing.get(key, ()) if m is not x]


def _read_after(m, n, pos) -> bool:
    """An op other than n reads m after n."""
    return any(u is not n and pos[u] > pos[n] for u in m.users)


def _flat_nodes(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat_nodes(a)
        elif isinstance(a, torch.fx.Node):
            yield a


def _same_layout(a, b) -> bool:
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
            and a.shape == b.shape and a.stride() == b.stride() and dense(a))


SMALL = 64  # elements: a value this small is a scalar's worth of work


def _small(node) -> bool:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    # a symbolic size is not small: asking would add a guard on it
    return bool(vals) and all(
        isinstance(v, torch.Tensor) and isinstance(v.numel(), int) and v.numel() <= SMALL for v in vals)


def _pure(node) -> bool:
    """node computes a value from its inputs and nothing else: no write, no
    random draw (moving one would change which numbers it draws)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    schema = node.target._schema
    return not schema.is_mutable and torch.Tag.nondeterministic_seeded not in node.target.tags


def hoist_small(gm: torch.fx.GraphModule) -> int:
    """Move each pure op on small values (an optimizer's per-parameter bias
    corrections) to just after its last input. DeferAndFuse fuses a chain
    of ops on large tensors into one group only while no newer group
    computes something the chain reads: with the small values computed
    first, an optimizer's whole per-parameter chain is one group, and its
    temporaries are never written. Runs on the functional graph (before
    write_back_in_place), so data dependencies are all there is. Returns
    the ops moved."""
    tail = {}  # a node -> the last node moved to just after it
    moved = 0
    for n in list(gm.graph.nodes):
        if not (_pure(n) and _small(n)) or not n.all_input_nodes:
            continue
        anchor = max(n.all_input_nodes)  # fx nodes compare by their place in the graph
        dest = tail.get(anchor, anchor)
        if dest.next is n:
            continue
        dest.append(n)
        tail[anchor] = n
        moved += 1
    return moved


def write_back_in_place(gm: torch.fx.GraphModule) -> int:
    """Where a graph writes its input x back at its end (``copy_(x, y)``,
    AOTAutograd's form of an in-place update: an optimizer step), compute y
    in x's memory instead: each out-of-place pointwise or foreach op of the
    chain from x to y that is the last reader of x's current value becomes
    its in-place form, and the copy_ goes. Returns the ops made in place."""
    g = gm.graph
    nodes = list(g.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    write_back = {}  # the input -> its copy_
    for n in nodes:
        if (n.op == "call_function" and n.target is torch.ops.aten.copy_.default and not n.users
                and n.args[0].op == "placeholder"):
            write_back[n.args[0]] = n
    buf = {x: x for x in write_back}  # a value -> the input whose memory it is in
    sharing = _sharing(nodes)

    def free_after(x, n):
        """Nothing reads x's value after n: n aside, and the write-back of
        x's input when x is what it writes to, not what it reads; nor any
        other value in x's memory (an alias no schema names)."""
        for u in x.users:
            if u is n or (u is write_back[buf[x]] and u.args[0] is x and u.args[1] is not x):
                continue
            if pos[u] > pos[n] or _aliases_input(u):
                return False
        others = _others_in_memory(x, sharing)
        return others is not None and not any(_read_after(m, n, pos) for m in others)

    made = 0
    for n in nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload) or not n.args:
            continue
        inplace = _inplace_variant(n.target)
        if inplace is None:
            continue
        foreach = isinstance(n.args[0], (list, tuple))
        selfs = list(n.args[0]) if foreach else [n.args[0]]
        if not selfs or not all(isinstance(x, torch.fx.Node) and x in buf and free_after(x, n) for x in selfs):
            continue
        mine = {buf[x] for x in selfs}
        if len(mine) != len(selfs) or any(buf.get(o) in mine for o in _flat_nodes((n.args[1:], n.kwargs))):
            continue
        val = n.meta.get("val")
        vals = list(val) if foreach and isinstance(val, (list, tuple)) else [val]
        if len(vals) != len(selfs) or not all(_same_layout(x.meta.get("val"), v) for x, v in zip(selfs, vals)):
            continue
        if foreach:
            items = [u for u in n.users if u.target is operator.getitem]
            if len(items) != len(n.users) or any(o.op == "output" for u in items for o in u.users):
                continue
            n.target = inplace
            for u in items:
                u.replace_all_uses_with(selfs[u.args[1]])
                g.erase_node(u)
        else:
            if any(u.op == "output" for u in n.users):
                continue
            n.target = inplace
            buf[n] = buf[selfs[0]]
        made += 1
    for x, c in write_back.items():
        if buf.get(c.args[1]) is x:
            g.erase_node(c)
    return made


# Ops with no in-place form whose kernels may write their result over their
# first operand (each line's sum is taken before the line is written).
_OVER_FIRST = (torch.ops.aten._softmax_backward_data.default, torch.ops.aten._log_softmax_backward_data.default)


def _over_first_form(op):
    """(overload, keyword of its result tensor) through which op writes
    its result over its first operand, or None."""
    if op in _OVER_FIRST:
        out = op.overloadpacket.out
        return out, next(a.name for a in out._schema.arguments if a.is_out)
    inplace = _inplace_variant(op)
    return (inplace, None) if inplace is not None and not inplace.name().startswith("aten::_foreach_") else None


def compute_over_dead_buffers(gm: torch.fx.GraphModule) -> int:
    """An op whose first operand is memory the graph allocated itself and
    reads for the last time there, laid out as the op's result, writes its
    result over that operand (a pointwise op through its in-place form, a
    softmax backward through its out= form) instead of taking new memory:
    the graph's peak is lower where such an op meets it (the cross-entropy
    gradient of a language model's logits: nll_loss_backward's dense
    gradient becomes the softmax backward's result, one logits-sized
    tensor less). Only values of the graph's own ops qualify, never its
    inputs (autograd may still hold saved tensors) nor anything a view
    reads; the result is the same values in the same order, so results
    are unchanged. Runs last. Returns the ops rewritten."""
    own = set()  # values whose memory this pass hands on: results written over a dead operand
    made = 0
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    sharing = _sharing(nodes)
    for n in nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload) or not n.args:
            continue
        form = _over_first_form(n.target)
        x = n.args[0]
        if form is None or not isinstance(x, torch.fx.Node) or x.op != "call_function":
            continue
        if x not in own and (_aliases_input(x) or not isinstance(x.target, torch._ops.OpOverload)
                             or x.target._schema.is_mutable):
            continue  # a view, an in-place op or a multi-output op's item: memory it does not own alone
        if not _same_layout(x.meta.get("val"), n.meta.get("val")):
            continue
        if any(u is not n and (pos[u] > pos[n] or _aliases_input(u)) for u in x.users):
            continue  # read after n, or through a view
        others = _others_in_memory(x, sharing)
        if others is None or any(m.op != "call_function" or pos[m] > pos[n] or _read_after(m, n, pos)
                                 for m in others):
            continue  # its memory is an input's, or another value in it is read after n
        if any(o is x for o in _flat_nodes((n.args[1:], n.kwargs))) and form[1] is not None:
            continue  # a line read as the other operand too
        op, out = form
        n.target = op
        if out is not None:
            n.kwargs = {**n.kwargs, out: x}
        own.add(n)
        made += 1
    return made


_FILLS = (torch.ops.aten.full_like.default, torch.ops.aten.full.default)


def _fill_value_only(f, user) -> bool:
    """user reads the fill f only as a value broadcast against its other
    operands: never as the tensor an op writes or takes its shape from."""
    op = user.target if user.op == "call_function" else None
    if not isinstance(op, torch._ops.OpOverload) or not user.args or op._schema.is_mutable and user.args[0] is f:
        return False
    shape = f.meta.get("val").shape
    name = op.overloadpacket.__name__
    if name.startswith("_foreach_"):
        first = user.args[0]
        if not isinstance(first, (list, tuple)) or f in first:
            return False
        for a in user.args[1:]:
            if a is f:
                return False
            for i, x in enumerate(a if isinstance(a, (list, tuple)) else ()):
                # f at place i: the tensor at place i of self's list gives the shape
                other = first[i].meta.get("val") if isinstance(first[i], torch.fx.Node) else None
                if x is f and (other is None or other.shape != shape):
                    return False
        return f not in user.kwargs.values()
    out = user.meta.get("val")
    return (torch.Tag.pointwise in op.tags and user.args[0] is not f and isinstance(out, torch.Tensor)
            and out.shape == shape)


def fold_fills(gm: torch.fx.GraphModule) -> int:
    """A tensor filled with one value (``full_like(x, c)``: Dynamo passes an
    optimizer's lerp weight so) that pointwise or foreach ops only read
    beside larger operands becomes a 0-dim tensor they broadcast: every
    element sees the same value, nothing writes a tensor of constants
    first. Returns the fills folded."""
    g = gm.graph
    done = 0
    for f in list(g.nodes):
        if f.op != "call_function" or f.target not in _FILLS or not f.users:
            continue
        val = f.meta.get("val")
        value = f.args[1]
        if not isinstance(val, torch.Tensor) or val.dim() == 0 or not isinstance(value, (int, float, bool)):
            continue
        if not all(_fill_value_only(f, u) for u in f.users):
            continue
        with g.inserting_before(f):
            scalar = g.call_function(torch.ops.aten.full.default, ([], value),
                                     {"dtype": val.dtype, "device": val.device})
        f.replace_all_uses_with(scalar)
        g.erase_node(f)
        done += 1
    return done


_SCATTERS = {
    torch.ops.aten.slice_scatter.default: torch.ops.aten.slice.Tensor,
    torch.ops.aten.select_scatter.default: torch.ops.aten.select.int,
}


def _zero_fill(x, val) -> bool:
    """x is a fill of zeros shaped and typed as val (the partitioner's CSE
    may have merged several pieces' fills into one)."""
    if not isinstance(x, torch.fx.Node) or x.op != "call_function" or x.target not in _FILLS:
        return False
    v = x.meta.get("val")
    return (len(x.args) > 1 and not isinstance(x.args[1], bool) and x.args[1] == 0
            and isinstance(v, torch.Tensor) and v.shape == val.shape and v.dtype == val.dtype)


def _placed_piece(n, val):
    """(dim, start, end, src) when n is src placed in a tensor of zeros
    shaped as val (the gradient of a slice, decomposed to slice_scatter of a
    zero fill): src fills [start, end) along dim, zeros the rest. Else None."""
    if (not isinstance(n, torch.fx.Node) or n.op != "call_function"
            or n.target is not torch.ops.aten.slice_scatter.default or not _zero_fill(n.args[0], val)):
        return None
    v, src = n.meta.get("val"), n.args[1]
    s = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    # a contiguous src, so that the cat is laid out as the sum it replaces
    if (not isinstance(v, torch.Tensor) or v.shape != val.shape or v.dtype != val.dtype or len(n.users) != 1
            or not isinstance(s, torch.Tensor) or s.dtype != val.dtype or not s.is_contiguous()):
        return None
    args = dict(zip(("dim", "start", "end", "step"), n.args[2:]), **n.kwargs)
    dim, start, end = args.get("dim", 0), args.get("start"), args.get("end")
    if args.get("step", 1) != 1 or not all(isinstance(a, (int, type(None))) for a in (dim, start, end)):
        return None
    dim %= v.dim()
    size = v.shape[dim]
    if not isinstance(size, int):
        return None
    start = 0 if start is None else min(max(start + size if start < 0 else start, 0), size)
    end = size if end is None else min(max(end + size if end < 0 else end, 0), size)
    return (dim, start, end, src) if start < end else None


def _sum_within(n, root, val) -> bool:
    """n is the sum root, or a sum of the same shape and dtype that only
    the sum above it reads: a node of root's sum tree."""
    if not isinstance(n, torch.fx.Node):
        return False
    v = n.meta.get("val")
    return (n.op == "call_function" and n.target is torch.ops.aten.add.Tensor and len(n.args) == 2
            and n.kwargs.get("alpha", 1) == 1 and (n is root or len(n.users) == 1)
            and isinstance(v, torch.Tensor) and v.shape == val.shape and v.dtype == val.dtype)


def join_placed_pieces(gm: torch.fx.GraphModule) -> int:
    """A sum of pieces each placed in its own tensor of zeros, side by side
    along one dim and covering it, becomes one ``cat`` of the pieces. The
    gradient of ``x[..., :k]`` and ``x[..., k:]`` (a rotary embedding's
    halves) is such a sum: AOTAutograd gives ``slice_scatter(zeros, g_i)``
    per piece and adds them. After it nothing fills zeros, copies a piece
    into them or adds tensors half of zeros; the sum of zeros and one piece
    per element is that piece, exactly, so results are unchanged. Runs
    first, on the functional graph. Returns the sums rewritten."""
    g = gm.graph
    done, gone = 0, set()
    for root in reversed(list(g.nodes)):  # the outermost sum of a tree first
        val = root.meta.get("val")
        if root in gone or not isinstance(val, torch.Tensor) or val.dim() == 0 or not val.is_contiguous() or \
                not _sum_within(root, root, val):
            continue
        terms, sums, stack = [], [], [root]
        while stack:
            n = stack.pop()
            if _sum_within(n, root, val):
                sums.append(n)
                stack.extend(reversed(n.args))
            else:
                terms.append(n)
        pieces = [_placed_piece(t, val) for t in terms]
        if any(p is None or p[0] != pieces[0][0] for p in pieces):
            continue
        dim = pieces[0][0]
        pieces.sort(key=lambda p: p[1])
        if pieces[0][1] != 0 or pieces[-1][2] != val.shape[dim] or any(
                a[2] != b[1] for a, b in zip(pieces, pieces[1:])):
            continue  # a gap or an overlap: the zeros or the sum still matter
        with g.inserting_before(root):
            cat = g.call_function(torch.ops.aten.cat.default, ([p[3] for p in pieces], dim))
        cat.meta["val"] = val
        root.replace_all_uses_with(cat)
        for n in sums:  # each sum, then what it read: none has a user left
            g.erase_node(n)
        for t in terms:
            fill = t.args[0]
            g.erase_node(t)
            if not fill.users:
                g.erase_node(fill)
        gone.update(sums)
        done += 1
    return done


def scatter_in_place(gm: torch.fx.GraphModule) -> int:
    """``y = slice_scatter(x, src, ...)`` (the gradient of a slice: a zero
    tensor with src in part of it) where nothing else reads x and x is a
    tensor of its own (no input, no view): write src into x's slice in place
    (``x[...].copy_(src)``) instead of copying all of x first. Runs last: it
    leaves the graph with writes. Returns the scatters rewritten."""
    g = gm.graph
    done = 0
    for n in list(g.nodes):
        view_op = _SCATTERS.get(n.target) if n.op == "call_function" else None
        if view_op is None:
            continue
        x, src = n.args[0], n.args[1]
        if (not isinstance(x, torch.fx.Node) or x.op != "call_function" or _aliases_input(x)
                or not _pure(x) or len(x.users) != 1):
            continue
        with g.inserting_before(n):
            view = g.call_function(view_op, (x, *n.args[2:]), dict(n.kwargs))
            g.call_function(torch.ops.aten.copy_.default, (view, src))
        n.replace_all_uses_with(x)
        g.erase_node(n)
        done += 1
    return done


class Program(OutputCode):
    """The passes above edit gm.graph; a Program checks and recompiles it
    once, after all of them.

    One ATen graph (forward, backward or inference) ready to run: called
    with the graph's inputs as a list (AOTAutograd's boxed convention: the
    list is emptied, so inputs the graph no longer needs are freed as it
    runs), it runs the graph's ops in DeferAndFuse (in Debug mode when the
    caller is in it) and returns its outputs.

    A Program is AOTAutograd's "output code": the compile cache
    (vtpu.compile_cache) pickles it with the rest of a graph's entry, as its
    graph's code, and a process that loads the entry rebuilds it from that
    code without running the passes again."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str):
        t0 = time.perf_counter_ns()
        self.joins = join_placed_pieces(gm)
        self.hoisted = hoist_small(gm)
        self.in_place = write_back_in_place(gm)
        self.scatters = scatter_in_place(gm)
        self.fills = fold_fills(gm)
        self.over_dead = compute_over_dead_buffers(gm)
        gm.graph.lint()
        self.kind = kind
        self._box(gm)
        self._time_taken_ns = time.perf_counter_ns() - t0
        self._fx_graph_cache_key = None
        self._graph = None

    def _box(self, gm):
        self.gm = gm
        self._boxed_call = True  # an instance attribute: the wrappers Dynamo puts around a backward copy it
        gm.graph.set_codegen(torch.fx.graph._BoxedCodeGen())  # the graph takes the list and clears it
        gm.recompile()
        self.num_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")

    def prepare_for_serialization(self):
        # called on a shallow copy of the Program about to be pickled: the
        # live one keeps its graph module
        from torch._functorch._aot_autograd.aot_autograd_result import serialize_graph_module

        graph = copy.deepcopy(self.gm.graph)
        graph.set_codegen(torch.fx.graph.CodeGen())
        self._graph = serialize_graph_module(torch.fx.GraphModule(self.gm, graph))
        self.gm = None

    def post_compile(self, example_inputs, constants, graph_kwargs):
        if self.gm is None:  # loaded from the cache
            self._box(self._graph.deserialize())
            self._graph = None

    def set_triton_bundle(self, triton_bundle):
        pass

    def __call__(self, args):
        _C._flush()  # ops the caller recorded run before the program's
        # Debug mode's checks (every op completes, errors at the op) hold
        # inside a program too; otherwise its ops fuse
        debug = _C._get_eager_mode() == EagerMode.DEBUG
        _C._push_context(int(EagerMode.DEBUG if debug else EagerMode.DEFER_AND_FUSE), -1, -1)
        _C._program_begin()
        try:
            return self.gm.forward(args)  # not through nn.Module.__call__ (hooks the graph never has)
        finally:
            _C._program_end()
            _C._pop_context()
            _C._flush()

    def __repr__(self):
        return f"<vtpu Program {self.kind}: {self.num_nodes} ops>"


def _compiler(kind):
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

    def compile_graph(gm, example_inputs):
        compile_cache.compiled()
        return Program(gm, kind)

    # "serializable": AOTAutograd looks the graph up in the cache first
    return SerializableAOTDispatchCompiler(Program, compile_graph)


@functools.cache
def _backend():
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return aot_autograd(
        fw_compiler=_compiler("forward"),
        bw_compiler=_compiler("backward"),
        inference_compiler=_compiler("inference"),
        decompositions=decompositions(),
        # an inference graph's writes to its inputs stay in it (as copy_ at
        # the end), for write_back_in_place
        keep_inference_input_mutations=True,
        partition_fn=min_cut_rematerialization_partition,
    )


def tpu(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The "tpu" backend of torch.compile."""
    with compile_cache.compiling():
        return _backend()(gm, example_inputs, **kwargs)


def _on_tpu(gm, example_inputs) -> bool:
    """Whether a graph handed to Inductor computes on "tpu" tensors."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return True
    graph = getattr(gm, "graph", None)
    for node in graph.nodes if graph is not None else ():
        v = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(v, torch.Tensor) and v.device.type == "tpu":
            return True
    return False


_routed_note = False


def route_inductor(module) -> None:
    """Wrap torch._inductor.compile_fx.compile_fx (what torch.compile's
    default backend calls) so that graphs on "tpu" tensors compile with the
    "tpu" backend: Inductor would pick a code generator for another TPU
    stack, and its CPU code cannot see the device queue's order."""
    inner = module.compile_fx
    if getattr(inner, "_vtpu_routed", False):
        return

    @functools.wraps(inner)
    def compile_fx(model_, example_inputs_, *args, **kwargs):
        global _routed_note
        if not _on_tpu(model_, example_inputs_):
            return inner(model_, example_inputs_, *args, **kwargs)
        if not _routed_note:
            _routed_note = True
            warnings.warn(
                'vtpu: torch.compile\'s default backend (Inductor) has no code generator for "tpu" tensors; '
                'this graph is compiled with backend="tpu" instead (pass backend="tpu" to say so)',
                stacklevel=2,
            )
        return tpu(model_, example_inputs_)

    compile_fx._vtpu_routed = True
    module.compile_fx = compile_fx
