# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "CLEAVE"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "conformance"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cleave_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%cleave_src", config.cleave_src_root))
config.substitutions.append(("%python", "/usr/bin/python3"))
# The TorchScript front end is built where libtorch is found.
if config.cleave_torchscript == "1":
    config.available_features.add("torchscript")

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.cleave_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["cleave-opt", "cleave"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.cleave_tools_dir, append_path=True)
