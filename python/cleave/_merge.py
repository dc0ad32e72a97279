"""Low-rank adapters folded into their base weights (PEFT's
merge_and_unload), found from the graph, not from names.

An adapter is a branch ``X -> s * X A B`` added to a base ``X -> X W (+ b)``
that reads the same ``X`` (or its Dropout: merging folds the function as
evaluated), where A, B and W are constant matrices: weights read
directly, through a 2-D Transpose (torch.onnx's Linear) or by Gemm
(``transB``, ``alpha``, a constant bias C on the base), and ``s`` the
product of the scalar constants the branch multiplies or divides by
anywhere along it. Weights that train and are no adapter stay (a head
trained whole). What the merge changes must serve the adapter alone:
a base weight, product or Transpose read elsewhere too is an error, not a
merge. (X itself must not be a constant product: a Linear fed straight by
another is not matched, and its adapter is reported.) The merged base holds
``W + s A B`` (in W's own layout); the adapter's nodes and weights go, and
the Add becomes an Identity of the base's output, so every other name in
the graph stays.
"""

from typing import Dict, List, Optional, Set, Tuple

import numpy as np

from ._native import Error


class _Graph:
    def __init__(self, model):
        import onnx.numpy_helper as nh
        self.model = model
        g = model.graph
        self.inits = {t.name: nh.to_array(t) for t in g.initializer}
        self.producer = {o: n for n in g.node for o in n.output}
        self.uses: Dict[str, int] = {}
        for n in g.node:
            for i in n.input:
                self.uses[i] = self.uses.get(i, 0) + 1
        for o in g.output:
            self.uses[o.name] = self.uses.get(o.name, 0) + 1

    def constant(self, name) -> Optional[np.ndarray]:
        if name in self.inits:
            return self.inits[name]
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            import onnx
            for a in node.attribute:
                if a.name == "value":
                    return onnx.numpy_helper.to_array(a.t)
        return None

    def scalar(self, name) -> Optional[float]:
        c = self.constant(name)
        # Rank 0 or 1 only: a [1, 1, 1] factor would broadcast the branch
        # to a higher rank, which the base's output does not have.
        if c is None or c.size != 1 or c.ndim > 1 or name in self.inits:
            return None  # an initializer of one element may be a weight
        return float(c.reshape(()))

    def matrix(self, name) -> Optional[Tuple[np.ndarray, str, bool]]:
        """(the [in, out] matrix X is multiplied by, its weight, whether the
        weight is stored transposed)."""
        if name in self.inits and self.inits[name].ndim == 2:
            return self.inits[name], name, False
        node = self.producer.get(name)
        # A Transpose two products share would fold the adapter twice.
        if node is not None and node.op_type == "Transpose" and \
                node.input[0] in self.inits and \
                self.inits[node.input[0]].ndim == 2 and \
                self.uses.get(name, 0) == 1 and \
                _attr(node, "perm", [1, 0]) == [1, 0]:
            return self.inits[node.input[0]].T, node.input[0], True
        return None


def _attr(node, name, default):
    import onnx
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


# A branch: X, the weights it multiplies by in order (matrix, weight name,
# stored transposed), the product of its scalars, the nodes it spans.
_Branch = Tuple[str, List[Tuple[np.ndarray, str, bool]], float, List[object]]


def _branch(g: _Graph, value: str) -> _Branch:
    """``value`` as X times constant matrices and scalars (X is where the
    walk stops: the first value that is not such a product)."""
    node = g.producer.get(value)
    if node is None:
        return value, [], 1.0, []
    op, ins = node.op_type, list(node.input)
    if op in ("Dropout", "Identity") and value == node.output[0]:
        # PEFT's lora_dropout: merging folds the function as evaluated,
        # without dropout.
        x, ms, s, nodes = _branch(g, ins[0])
        if ms:
            return value, [], 1.0, []
        return x, [], 1.0, nodes + [node]
    if op == "MatMul":
        m = g.matrix(ins[1])
        if m is not None:
            x, ms, s, nodes = _branch(g, ins[0])
            return x, ms + [m], s, nodes + [node]
    elif op == "Gemm" and len(ins) == 2 and not _attr(node, "transA", 0):
        m = g.matrix(ins[1])
        if m is not None:
            if _attr(node, "transB", 0):
                m = (m[0].T, m[1], not m[2])
            x, ms, s, nodes = _branch(g, ins[0])
            return x, ms + [m], s * _attr(node, "alpha", 1.0), nodes + [node]
    elif op in ("Mul", "Div"):
        for i, j in ((1, 0), (0, 1)):
            c = g.scalar(ins[i])
            if c is not None and not (op == "Div" and i == 0):
                x, ms, s, nodes = _branch(g, ins[j])
                return x, ms, (s / c if op == "Div" else s * c), \
                    nodes + [node]
    return value, [], 1.0, []


def _base_branch(g: _Graph, value: str) -> _Branch:
    """As _branch, seeing through a bias added to the product (the merge
    leaves the bias as it is)."""
    node = g.producer.get(value)
    if node is not None and node.op_type == "Add":
        for i, j in ((1, 0), (0, 1)):
            if g.constant(node.input[i]) is not None:
                x, ms, s, nodes = _branch(g, node.input[j])
                return x, ms, s, nodes + [node]
    if node is not None and node.op_type == "Gemm" and \
            len(node.input) == 3 and g.constant(node.input[2]) is not None \
            and not _attr(node, "transA", 0):
        # A biased Linear on a 2-D input: Gemm(X, W, b, transB=1).
        m = g.matrix(node.input[1])
        if m is not None:
            if _attr(node, "transB", 0):
                m = (m[0].T, m[1], not m[2])
            x, ms, s, nodes = _branch(g, node.input[0])
            return x, ms + [m], s * _attr(node, "alpha", 1.0), \
                nodes + [node]
    return _branch(g, value)


def merge_adapters(model, adapters: Set[str]) -> Tuple[object, Set[str]]:
    """Folds every adapter of ``model`` (an onnx.ModelProto with its
    weights) whose weights are all in ``adapters`` (what trains) into its
    base; returns the model and the adapter weights it removed. Raises
    Error where an adapter cannot be folded, or there is none."""
    import onnx
    g = _Graph(model)
    # base weight -> (its merged [in, out] matrix, stored transposed)
    merged: Dict[str, Tuple[np.ndarray, bool]] = {}
    removed: Set[str] = set()
    for node in model.graph.node:
        if node.op_type != "Add":
            continue
        for base_in, lora_in in ((0, 1), (1, 0)):
            x, base, s_base, base_nodes = _base_branch(g, node.input[base_in])
            y, lora, s_lora, lora_nodes = _branch(g, node.input[lora_in])
            if x != y or len(base) != 1 or len(lora) != 2 or \
                    base[0][1] in adapters or \
                    not all(w in adapters for _, w, _ in lora):
                continue
            (w, wname, wt), (a, aname, _), (b, bname, _) = base[0], *lora
            if a.shape[0] != w.shape[0] or b.shape[1] != w.shape[1] or \
                    s_base == 0:
                continue
            # The adapter's nodes must serve it alone; so must the base
            # weight, which the merge changes for every reader.
            if any(g.uses.get(o, 0) != 1 for n in lora_nodes + base_nodes
                   for o in n.output if n.op_type not in ("Dropout", "Identity")) \
                    or g.uses.get(wname, 0) != 1 or wname in merged:
                raise Error(f"merge_adapters: the adapter {aname!r}, "
                            f"{bname!r} beside {wname!r} shares its values "
                            "with other parts of the graph; it cannot be "
                            "folded into the base")
            m = merged.get(wname, (w.astype(np.float64), wt))[0]
            m = m + (s_lora / s_base) * (a.astype(np.float64) @ b)
            merged[wname] = (m, wt)
            removed.update((aname, bname))
            # The Add now passes the base's output on.
            lora_value = node.input[lora_in]
            keep = node.input[base_in]
            node.op_type = "Identity"
            del node.input[:]
            node.input.append(keep)
            g.uses[lora_value] -= 1
            break
    # Other weights that train stay as they are (PEFT's modules_to_save: a
    # classifier head trained whole).
    if not removed:
        raise Error("merge_adapters: the model has no low-rank adapter (X A B "
                    "of weights that train, scaled by constants, added to X W "
                    "of a frozen weight W) to fold into its base")
    _drop_dead(model)
    inits = {t.name: t for t in model.graph.initializer}
    for name, (m, transposed) in merged.items():
        # W as stored: X W, or its transpose where X is multiplied by W^T.
        value = np.ascontiguousarray(m.T if transposed else m)
        inits[name].CopyFrom(onnx.numpy_helper.from_array(
            value.astype(g.inits[name].dtype), name))
    live = {i for n in model.graph.node for i in n.input}
    kept = [t for t in model.graph.initializer
            if t.name not in removed or t.name in live]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return model, removed - live


def _drop_dead(model) -> None:
    """Removes the nodes nothing reads (the folded adapters' branches)."""
    outputs = {o.name for o in model.graph.output}
    while True:
        read = {i for n in model.graph.node for i in n.input} | outputs
        alive = [n for n in model.graph.node
                 if any(o in read for o in n.output)]
        if len(alive) == len(model.graph.node):
            return
        del model.graph.node[:]
        model.graph.node.extend(alive)
