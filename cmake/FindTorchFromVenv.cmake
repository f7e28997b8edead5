# Locates LibTorch inside the torch wheel of the project's virtual environment
# (scripts/setup.sh makes it) and decides whether CUDA sources are built.
#
# Sets: TITAN_PYTHON (the venv's interpreter), TITAN_HAS_CUDA (ON/OFF), and the
# usual TORCH_LIBRARIES / TORCH_CXX_FLAGS from find_package(Torch).

if(DEFINED ENV{TITAN_VENV})
  set(_titan_venv "$ENV{TITAN_VENV}")
else()
  set(_titan_venv "$ENV{HOME}/.cache/titan/venv")
endif()
find_program(TITAN_PYTHON NAMES python3 python HINTS "${_titan_venv}/bin" NO_DEFAULT_PATH)
if(NOT TITAN_PYTHON)
  find_program(TITAN_PYTHON NAMES python3 python)
endif()
execute_process(
  COMMAND "${TITAN_PYTHON}" -c "import torch, os; print(torch.utils.cmake_prefix_path); print(int(torch.backends.cuda.is_built())); print(os.path.dirname(torch.__file__))"
  OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _torch_rc)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "titan: cannot import torch with ${TITAN_PYTHON}; run scripts/setup.sh first (or set TITAN_VENV)")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 _torch_prefix)
list(GET _torch_info 1 _torch_cuda_built)
list(GET _torch_info 2 TITAN_TORCH_DIR)
list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")

# The CUDA wheel's CMake config looks for the toolkit; point it at the standard place.
if(_torch_cuda_built AND NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
endif()

# PyPI's torch for Linux x86-64 is a CUDA build: it *runs* without the CUDA
# toolkit (its runtime libraries come as nvidia-* wheels), but LibTorch's
# CMake config (Caffe2Config.cmake) stops when it cannot find the toolkit.
# A machine without one (a learner's laptop) or a build that asks for no CUDA
# (TITAN_WITH_CUDA=OFF) takes LibTorch's CPU targets from the wheel itself:
# Caffe2Targets.cmake, the file that declares libtorch_cpu and libc10 with
# the definitions their headers need (USE_DISTRIBUTED, USE_C10D_GLOO, ...),
# without the CUDA search around it. Nothing CUDA is linked: the build is
# CPU-only, as TITAN_WITH_CUDA=OFF always was.
set(TITAN_TORCH_WITHOUT_TOOLKIT OFF)
if(_torch_cuda_built)
  if(TITAN_WITH_CUDA STREQUAL "OFF")
    set(TITAN_TORCH_WITHOUT_TOOLKIT ON)
  else()
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND)
      if(TITAN_WITH_CUDA STREQUAL "ON")
        message(FATAL_ERROR "titan: TITAN_WITH_CUDA=ON but the CUDA toolkit was not found "
                            "(install it, or set CUDAToolkit_ROOT)")
      endif()
      set(TITAN_TORCH_WITHOUT_TOOLKIT ON)
      message(STATUS "titan: no CUDA toolkit found: a CPU-only build with LibTorch's CPU libraries from the wheel")
    endif()
  endif()
endif()

if(TITAN_TORCH_WITHOUT_TOOLKIT)
  set(_caffe2_dir "${_torch_prefix}/Caffe2")
  # The two helper targets that Caffe2Targets.cmake names in libtorch_cpu's
  # link interface: protobuf and MKL are linked into libtorch_cpu itself, and
  # Caffe2Config.cmake declares them just as empty (protobuf) or from a
  # search that finds nothing here (MKL).
  if(NOT TARGET protobuf::libprotobuf)
    add_library(titan_no_protobuf INTERFACE)
    add_library(protobuf::libprotobuf ALIAS titan_no_protobuf)
  endif()
  if(NOT TARGET caffe2::mkl)
    add_library(caffe2::mkl INTERFACE IMPORTED)
  endif()
  include("${_caffe2_dir}/Caffe2Targets.cmake")
  # What TorchConfig.cmake adds on top: the C++ frontend's include folder.
  add_library(titan_torch_cpu INTERFACE)
  target_link_libraries(titan_torch_cpu INTERFACE torch_cpu_library c10)
  target_include_directories(titan_torch_cpu INTERFACE "${TITAN_TORCH_DIR}/include"
                             "${TITAN_TORCH_DIR}/include/torch/csrc/api/include")
  set(TORCH_LIBRARIES titan_torch_cpu)
  set(TORCH_CXX_FLAGS "")
  message(STATUS "titan: LibTorch's CPU libraries from ${TITAN_TORCH_DIR}/lib (Caffe2Targets.cmake, no CUDA)")
else()
  # LibTorch's CMake config adds nvcc flags for TORCH_CUDA_ARCH_LIST; titan's
  # own kernels take CMAKE_CUDA_ARCHITECTURES (below), so keep its list short.
  if(NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "9.0")
  endif()
  find_package(Torch REQUIRED)
  message(STATUS "titan: LibTorch from ${_torch_prefix} (CUDA built: ${_torch_cuda_built})")
endif()

set(TITAN_HAS_CUDA OFF)
if(NOT TITAN_WITH_CUDA STREQUAL "OFF" AND NOT TITAN_TORCH_WITHOUT_TOOLKIT)
  include(CheckLanguage)
  check_language(CUDA)
  if(_torch_cuda_built AND CMAKE_CUDA_COMPILER)
    set(TITAN_HAS_CUDA ON)
  elseif(TITAN_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "titan: TITAN_WITH_CUDA=ON but LibTorch has no CUDA or nvcc was not found")
  endif()
endif()
# The GPU architectures titan's CUDA kernels are compiled for. By default
# the ones people train on, in two images: sm_80 code (A100; a binary for
# sm_80 also runs on sm_86 and sm_89, the RTX 30xx/40xx and L4/L40 cards)
# and sm_90 code with its PTX (H100/H200; the driver compiles the PTX for
# later GPUs at load time). Two architectures, not four: nvcc's time grows
# with each. A GPU outside them runs ATen's ops (ops/cuda_kernels.hpp).
# "native" builds for the GPUs of the building machine alone.
set(TITAN_CUDA_ARCHITECTURES "80-real;90" CACHE STRING
    "GPU architectures of titan's CUDA kernels (CMake's CUDA_ARCHITECTURES: e.g. 80-real;90, native)")
if(TITAN_HAS_CUDA)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_ARCHITECTURES ${TITAN_CUDA_ARCHITECTURES})
  message(STATUS "titan: CUDA kernels for ${TITAN_CUDA_ARCHITECTURES}")
endif()
message(STATUS "titan: CUDA sources ${TITAN_HAS_CUDA}")

# nccl.h: the headers of the NCCL that torch links, the nvidia-nccl wheel
# next to torch (torch's RUNPATH loads nvidia/nccl/lib/libnccl.so.2), and
# only without the wheel the CUDA toolkit's. ProcessGroupNCCL::Options embeds
# an ncclConfig_t, so compiling backend_nccl.cpp against another NCCL
# version's nccl.h (/usr/local/cuda's may differ from the wheel's) changes
# the struct's layout under torch's feet. The toolkit's include folder is on
# every CUDA compile line as -isystem (CUDA::cudart); lib/titan puts this one
# on backend_nccl.cpp's line as -I, which the compiler searches first.
find_path(TITAN_NCCL_INCLUDE nccl.h
  HINTS "${TITAN_TORCH_DIR}/../nvidia/nccl/include" NO_DEFAULT_PATH)
if(NOT TITAN_NCCL_INCLUDE)
  find_path(TITAN_NCCL_INCLUDE nccl.h HINTS /usr/local/cuda/include)
endif()
