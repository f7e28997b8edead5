#pragma once
// Runs CUDA device code on CPU threads, so that the CUDA flash kernels'
// source (lib/titan/ops/attention/flash_cuda_kernels.cuh) is tested on a
// machine without a GPU: its tiling, masks, online softmax, GQA indexing,
// shared-memory layout and synchronisation, everything but the hardware.
//
// One std::thread per CUDA thread of a block, blocks one after another;
// __syncthreads and __syncwarp are real barriers over the block's and the
// warp's threads, __shfl_xor_sync exchanges through the block, atomicAdd
// takes a lock. WMMA's warp-wide operations run on the warp's lane 0 only
// (the others return at once): a fragment is never read by lanes, only
// stored to memory, so one lane computing it is the same as 32 sharing it.
// Products are exact in fp32 and summed in fp32, as on the tensor cores
// (whose summation order differs). bf16/fp16 are c10's, rounding to nearest
// even like __float2bfloat16/__float2half.
//
// Include after the LibTorch headers: it defines CUDA's keywords and the
// names threadIdx, blockIdx and blockDim as macros.

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace cuda_emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

/// A reusable barrier for n threads (C++17 has no std::barrier).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0, ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  uint64_t generation_ = 0;
};

struct Block {
  Dim3 idx, dim;
  Barrier all;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> exchange;       // one slot per thread, for shuffles
  std::vector<unsigned char> smem;   // the dynamic shared memory
  Block(Dim3 i, unsigned threads, size_t smem_bytes)
      // Shared memory starts as NaN bytes, not zeros: a kernel that reads
      // what it never wrote (or another thread's write before a barrier)
      // gets NaN here, as it may get garbage on a GPU.
      : idx(i), dim{threads, 1, 1}, all(static_cast<int>(threads)), exchange(threads), smem(smem_bytes + 128, 0xFF) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<Barrier>(32));
  }
};

struct Thread {
  Block* block = nullptr;
  Dim3 idx;
};
inline thread_local Thread self;

inline unsigned char* shared_memory() {
  auto p = reinterpret_cast<uintptr_t>(self.block->smem.data());
  return reinterpret_cast<unsigned char*>((p + 127) / 128 * 128);
}
inline unsigned lane() { return self.idx.x % 32; }
inline void warp_barrier() { self.block->warps[self.idx.x / 32]->arrive_and_wait(); }
inline std::mutex& atomic_lock() {
  static std::mutex m;
  return m;
}

/// Runs `body` as a kernel over grid.x × grid.y blocks of `threads` threads
/// (a multiple of 32) with `smem_bytes` of dynamic shared memory.
template <typename Body>
void launch(Dim3 grid, unsigned threads, size_t smem_bytes, const Body& body) {
  for (unsigned y = 0; y < grid.y; ++y) {
    for (unsigned x = 0; x < grid.x; ++x) {
      Block block(Dim3{x, y, 0}, threads, smem_bytes);
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&block, t, &body] {
          self.block = &block;
          self.idx = Dim3{t, 0, 0};
          body();
        });
      }
      for (auto& th : pool) th.join();
    }
  }
}

}  // namespace cuda_emu

#define __global__
#define __device__
#define __launch_bounds__(n)
#define TITAN_DYNAMIC_SMEM(name) unsigned char* name = cuda_emu::shared_memory()
#define threadIdx (cuda_emu::self.idx)
#define blockIdx (cuda_emu::self.block->idx)
#define blockDim (cuda_emu::self.block->dim)

using __nv_bfloat16 = c10::BFloat16;
using __half = c10::Half;
inline __nv_bfloat16 __float2bfloat16(float x) { return c10::BFloat16(x); }
inline __half __float2half(float x) { return c10::Half(x); }

struct uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

inline void __syncthreads() { cuda_emu::self.block->all.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_emu::warp_barrier(); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  cuda_emu::Block& b = *cuda_emu::self.block;
  const unsigned t = cuda_emu::self.idx.x;
  b.exchange[t] = v;
  cuda_emu::warp_barrier();
  const float other = b.exchange[t ^ static_cast<unsigned>(lane_mask)];
  cuda_emu::warp_barrier();  // nobody overwrites a slot before its reader read it
  return other;
}
inline float atomicAdd(float* p, float v) {
  std::lock_guard<std::mutex> lock(cuda_emu::atomic_lock());
  const float old = *p;
  *p = old + v;
  return old;
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has the 16x16x16 shape only");
  float x[16 * 16];  // (row, col) at x[row * 16 + col]
};
using acc_fragment = fragment<accumulator, 16, 16, 16, float>;

inline bool leader() { return cuda_emu::lane() == 0; }

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  if (!leader()) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = static_cast<float>(std::is_same_v<Layout, row_major> ? p[r * ld + c] : p[c * ld + r]);
}

inline void load_matrix_sync(acc_fragment& f, const float* p, unsigned ld, layout_t layout) {
  if (!leader()) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = layout == mem_row_major ? p[r * ld + c] : p[c * ld + r];
}

inline void store_matrix_sync(float* p, const acc_fragment& f, unsigned ld, layout_t layout) {
  if (!leader()) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) (layout == mem_row_major ? p[r * ld + c] : p[c * ld + r]) = f.x[r * 16 + c];
}

inline void fill_fragment(acc_fragment& f, float v) {
  if (!leader()) return;
  for (float& e : f.x) e = v;
}

template <typename T, typename LA, typename LB>
void mma_sync(acc_fragment& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const acc_fragment& c) {
  if (!leader()) return;
  float out[16 * 16];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.x[r * 16 + k] * b.x[k * 16 + n];
      out[r * 16 + n] = s;
    }
  for (int i = 0; i < 16 * 16; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
