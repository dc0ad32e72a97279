# -*- Python -*-
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "CLEAVE"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "unit", "conformance", "python"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cleave_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%cleave_src", config.cleave_src_root))
config.substitutions.append(("%cleave_obj", config.cleave_obj_root))
config.substitutions.append(("%python", "/usr/bin/python3"))
# Generated zoos shared by the tests of this build folder (zoo/zoo_cache.py).
config.substitutions.append(
    ("%zoo_cache", os.path.join(config.cleave_obj_root, "test", "zoo-cache")))
# The TorchScript front end is built where libtorch is found.
if config.cleave_torchscript == "1":
    config.available_features.add("torchscript")
# onnxruntime-node, the second reference executor, where scripts/setup.sh
# could install it from the npm registry.
ort_modules = os.path.join(
    os.environ.get("CLEAVE_ORT_DIR", os.path.join(config.cleave_obj_root, "ort")),
    "node_modules")
if os.path.isdir(os.path.join(ort_modules, "onnxruntime-node")) and shutil.which("node"):
    config.available_features.add("onnxruntime")
config.substitutions.append(("%ort_modules", ort_modules))


def cuda_gpu_present():
    """True when the NVIDIA driver loads and sees a GPU (asked through the
    driver API: no CUDA toolkit or nvidia-smi needed)."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 \
        and count.value > 0


# The CUDA backend is built where CUDA is installed; its GPU tests run where a
# GPU is present too (elsewhere lit reports them UNSUPPORTED). "nvcc": CUDA
# is installed here, so the build must have made the backend.
if os.path.exists("/usr/local/cuda/bin/nvcc"):
    config.available_features.add("nvcc")
config.substitutions.append(("%cleave_lib", os.path.join(config.cleave_obj_root, "lib")))
if config.cleave_cuda == "1":
    config.available_features.add("cuda")
    if cuda_gpu_present():
        config.available_features.add("cuda-gpu")

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.cleave_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["cleave-opt", "cleave-run", "cleave"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.cleave_tools_dir, append_path=True)
