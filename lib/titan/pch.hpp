// Precompiled header for titan and everything linked against it: the heavy
// torch headers, parsed once per build instead of once per source file.
#pragma once
#include <torch/torch.h>
#include <torch/csrc/autograd/custom_function.h>
