#!/usr/bin/env python3
"""Every committed checkpoint of two runs holds the same state: the same steps, every file the same
bytes (checked against its COMMITTED sha256), except optimizer.pt, compared by content in
parameter order (libtorch keys AdamW's state by tensor address: two processes write the same state
under other keys, in another order). Usage: same_checkpoints.py RUN_A RUN_B"""
import hashlib
import json
import os
import pickle
import sys
import zipfile


class _Unpickler(pickle.Unpickler):
    """A libtorch archive's data.pkl without torch: Modules as plain objects, tensors as
    (sha256 of their storage, offset, size, stride)."""

    def __init__(self, z, name):
        super().__init__(z.open(name))
        self.z, self.prefix = z, name[: -len("data.pkl")]

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda st, off, size, stride, *rest: (st, off, tuple(size), tuple(stride))
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        return name if module == "torch" else type(name, (), {})

    def persistent_load(self, pid):
        return hashlib.sha256(self.z.read(self.prefix + "data/" + pid[2])).hexdigest()


def optimizer_state(path):
    """AdamW's state per parameter group, in parameter order: libtorch keys the state by each
    tensor's address, so the file's bytes (the keys and their order) differ between processes."""
    z = zipfile.ZipFile(path)
    root = _Unpickler(z, [n for n in z.namelist() if n.endswith("data.pkl")][0]).load().__dict__
    state = {k: v.__dict__ for k, v in root["state"].__dict__.items()}
    groups = []
    for name, g in sorted(root["param_groups"].__dict__.items()):
        if not hasattr(g, "__dict__"):
            continue
        g = g.__dict__
        keys = [k for k in g if k.startswith("params/") and k != "params/size"]
        params = [state.get(g[k]) for k in sorted(keys, key=lambda k: int(k.split("/")[1]))]
        rest = {k: (v.__dict__ if hasattr(v, "__dict__") else v)
                for k, v in g.items() if not k.startswith("params/")}
        assert params and None not in params, (path, name, "parameters without AdamW state")
        groups.append((name, rest, params))
    return groups


def committed(run):
    d = run + "/checkpoints"
    out = {}
    for name in sorted(os.listdir(d)):
        marker = os.path.join(d, name, "COMMITTED")
        if not (name.startswith("step-") and os.path.isfile(marker)):
            continue
        files = json.load(open(marker))["files"]
        for f, e in files.items():
            data = open(os.path.join(d, name, f), "rb").read()
            assert hashlib.sha256(data).hexdigest() == e["sha256"], (d, name, f)
        out[name] = files
    return out


def main(run_a, run_b):
    a, b = committed(run_a), committed(run_b)
    assert a and sorted(a) == sorted(b), ("checkpoints", sorted(a), sorted(b))
    for name in a:
        assert sorted(a[name]) == sorted(b[name]), (name, sorted(a[name]), sorted(b[name]))
        for f in a[name]:
            if f == "optimizer.pt":
                pa, pb = (os.path.join(r, "checkpoints", name, f) for r in (run_a, run_b))
                assert optimizer_state(pa) == optimizer_state(pb), "%s/%s differs" % (name, f)
            else:
                assert a[name][f] == b[name][f], "%s/%s differs" % (name, f)
    print("  checkpoints equal: %s, %d files (optimizer.pt by content, the rest bitwise)"
          % (" ".join(sorted(a)), sum(len(v) for v in a.values())))


if __name__ == "__main__":
    main(*sys.argv[1:3])
