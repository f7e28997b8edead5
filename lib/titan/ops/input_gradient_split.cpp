#include "titan/ops/input_gradient_split.hpp"

#include <atomic>

namespace titan::ops {
namespace {
std::atomic<InputGradientSplitter*> g_active{nullptr};
}  // namespace

InputGradientSplitter* active_input_gradient_splitter() { return g_active.load(); }

InputGradientSplitterScope::InputGradientSplitterScope(InputGradientSplitter* splitter)
    : previous_(g_active.exchange(splitter)) {}

InputGradientSplitterScope::~InputGradientSplitterScope() { g_active.store(previous_); }

}  // namespace titan::ops
