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
# Only the architectures of the GPUs we run on (H100/H200: sm_90) keep nvcc fast.
if(NOT TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
find_package(Torch REQUIRED)
message(STATUS "titan: LibTorch from ${_torch_prefix} (CUDA built: ${_torch_cuda_built})")

set(TITAN_HAS_CUDA OFF)
if(NOT TITAN_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(_torch_cuda_built AND CMAKE_CUDA_COMPILER)
    set(TITAN_HAS_CUDA ON)
  elseif(TITAN_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "titan: TITAN_WITH_CUDA=ON but LibTorch has no CUDA or nvcc was not found")
  endif()
endif()
if(TITAN_HAS_CUDA)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_ARCHITECTURES 90)
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
