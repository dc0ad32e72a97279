"""The sharding stage never branches on an op's kind.

Usage: sharding_op_names.py SOURCE_ROOT

What an op means for sharding is its rule (lib/Sharding/ShardingRules.cpp,
the registry: factors, ShardingForm, the roles in ShardingRule.h), so a new
op, or a new split, is a rule and not a case in the partitioner. Every
source of lib/Sharding but the registry and its printer is read for a
cleave op class (CleaveOps.td's `def Cleave_XOp`) inside isa<>, dyn_cast<>,
cast<> (and their _or_null forms), getOps<>, a TypeSwitch's Case<>, as the
parameter of a walk's callback, or compared by name (XOp::getOperationName()
or a "cleave.x" string): each is one FAIL line. Building an op the stage
emits (XOp::create) is not a branch and passes, nor is reading back the
collectives it emits (all_reduce, all_gather, reduce_scatter, all_to_all,
shard_slice:
the stage's output, not ops it shards; --cleave-bucket-gradients merges its
own all-reduces). Prints the number of sources and op classes it read.
"""
import os
import re
import sys

REGISTRY = {"ShardingRules.cpp", "PrintShardingRules.cpp"}
CASTS = (r"\b(?:isa|dyn_cast|cast|dyn_cast_or_null|cast_or_null|"
         r"isa_and_nonnull|isa_and_present|dyn_cast_if_present|getOps)<([^<>]*)>")
WALK = r"\bwalk\(\s*\[[^\]]*\]\s*\(\s*((?:\w+::)*\w+)\s"
CASE = r"\bCase<([^<>]*)>"
NAMED = r"\b((?:\w+::)*\w+Op)::getOperationName\(\)"
# "cleave.add": the op a name string stands for (cleave.x -> XOp).
NAME_STRING = r'"cleave\.(\w+)"'
COLLECTIVES = {"AllReduceOp", "AllGatherOp", "ReduceScatterOp", "AllToAllOp",
               "ShardSliceOp"}


def class_of(mnemonic):
    return "".join(w.capitalize() for w in mnemonic.split("_")) + "Op"


def op_classes(root):
    with open(os.path.join(root, "dialects", "Cleave", "CleaveOps.td")) as f:
        return set(re.findall(r"^def Cleave_(\w+Op)\b", f.read(), re.M))


def main():
    root = sys.argv[1]
    ops = op_classes(root)
    folder = os.path.join(root, "lib", "Sharding")
    failures, sources = [], 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith((".cpp", ".h")) or name in REGISTRY:
            continue
        sources += 1
        with open(os.path.join(folder, name)) as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            code = re.sub(r"//.*", "", line)
            named = [t.strip() for pattern in (CASTS, CASE)
                     for m in re.finditer(pattern, code)
                     for t in m.group(1).split(",")]
            named += re.findall(WALK, code) + re.findall(NAMED, code)
            named += [class_of(m) for m in re.findall(NAME_STRING, code)]
            for t in named:
                prefix, _, cls = t.rpartition("::")
                # func::ReturnOp and the like are not cleave's.
                if cls in COLLECTIVES:
                    continue
                if cls in ops and (not prefix or prefix.endswith("cleave")):
                    failures.append(f"FAIL: lib/Sharding/{name}:{n} branches on "
                                    f"{t}: say it in the op's sharding rule")
    print(f"sharding op names: {sources} sources read for {len(ops)} op classes")
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
