# What a build can run is said where nobody misses it: a configure without CUDA warns
# "CPU-only build: no CUDA backend", --version prints the build's backends on its second line,
# and with nvcc but no GPU that nvidia-smi lists, CUDA is built for all three architectures.
# Args: the source directory and whether this build has the CUDA backend (ON/OFF).
source "$(dirname "$0")/lib.sh"
src=$1 have_cuda=$2
work=$(fresh_dir build_config)

cmake -S "$src" -B "$work/cpu" -DE3_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF > "$work/cpu.log" 2>&1 ||
  { cat "$work/cpu.log"; fail "configure with -DE3_ENABLE_CUDA=OFF"; }
grep -q "CPU-only build: no CUDA backend (E3_ENABLE_CUDA=OFF)" "$work/cpu.log" ||
  { cat "$work/cpu.log"; fail "a CPU-only configure does not say so"; }

"$E3_BIN" --version > "$work/version.txt" 2>&1 || { cat "$work/version.txt"; fail "--version exited non-zero"; }
if [ "$have_cuda" = ON ]; then
  grep -qx "CUDA backend for architectures .*" "$work/version.txt" || { cat "$work/version.txt"; fail "--version of a CUDA build"; }
else
  grep -qx "CPU-only build: no CUDA backend" "$work/version.txt" || { cat "$work/version.txt"; fail "--version of a CPU-only build"; }
fi

# cuBLASLt is opened when a CUDA forward starts (kernels/cublaslt_library.h): linked, its static
# initialisers would cost every command, --version and export included, a third of a second.
if ldd "$E3_BIN" | grep -q libcublasLt; then ldd "$E3_BIN"; fail "the binary links cuBLASLt instead of opening it"; fi

# The architectures: those of the GPUs nvidia-smi lists, else all three.
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  cmake -S "$src" -B "$work/cuda" -DBUILD_TESTING=OFF > "$work/cuda.log" 2>&1 || { cat "$work/cuda.log"; fail "configure with CUDA"; }
  if nvidia-smi --query-gpu=compute_cap --format=csv,noheader > /dev/null 2>&1; then
    grep -q "building CUDA for this machine's GPUs (nvidia-smi)" "$work/cuda.log" || { cat "$work/cuda.log"; fail "GPU present: not its architecture"; }
  else
    grep -q "no GPU found by nvidia-smi: building CUDA for 90a;100;120" "$work/cuda.log" ||
      { cat "$work/cuda.log"; fail "no GPU: not all three architectures"; }
  fi
  cmake -S "$src" -B "$work/cuda" -DCMAKE_CUDA_ARCHITECTURES=100 > "$work/cuda2.log" 2>&1 || fail "reconfigure"
  grep -q "CUDA backend ON (architectures 100)" "$work/cuda2.log" || { cat "$work/cuda2.log"; fail "-DCMAKE_CUDA_ARCHITECTURES not kept"; }
fi
