// CPU tensors in braidMemAlloc memory (allocator.cc): braid_torch.use_shared_memory().
#pragma once

#include <cstddef>

namespace braid_torch {

// Installs braid's CPU allocator in front of torch's (once) and turns it on or off: while on, CPU
// allocations of at least minBytes come from braidMemAlloc. Tensors keep the memory they got.
void useSharedMemory(bool enabled, size_t minBytes);
bool usesSharedMemory();

}  // namespace braid_torch
