#include "titan/metrics/rank_peak.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>

#include "titan/dist/process_group.hpp"
#include "titan/metrics/cpu_peak.hpp"
#include "titan/metrics/memory.hpp"
#include "titan/metrics/peak_flops.hpp"
#include "titan/util/strprintf.hpp"

namespace titan::metrics {
namespace {

// One process per node measures (local rank 0, between two barriers: the
// others wait there without computing) and every rank receives its figure
// through the world group, so ranks never calibrate at the same time and
// never depend on the cache file being writable. Across jobs the cache's
// file lock queues concurrent calibrations.
RankPeak calibrate_cpu(const RankPeakInputs& in) {
  const bool measures = !in.group || in.local_rank == 0;
  if (in.group) in.group->barrier();
  CpuPeak p;
  p.gemm = cpu_peak_gemm(in.compute_dtype);  // what every rank's figure is of
  // The GEMM of the dtype the job's matmuls run in: a CPU with bf16 vector
  // instructions multiplies bf16 ~2x faster than fp32 (440 vs 198 GFLOP/s on
  // this project's 2-core AVX-512 machine), so a bf16 job judged against
  // fp32's peak reported MFU up to twice too high.
  CpuCalibrationOptions calibration;
  calibration.dtype = in.compute_dtype;
  if (measures) p = cpu_peak_flops(calibration);
  if (in.group) {
    // The job-wide maximum of the nodes' figures (one per node; the others
    // contribute 0): identical CPUs give the same figure, and a mixed job
    // is judged against its fastest node, which keeps MFU low rather than
    // high.
    at::Tensor t = at::tensor({measures ? p.flops : 0.0, measures ? static_cast<double>(p.threads) : 0.0},
                              at::TensorOptions().dtype(at::kDouble));
    in.group->all_reduce(t, dist::ReduceOp::Max);
    if (!measures) {
      p.flops = t[0].item<double>();
      p.threads = at::get_num_threads();
      p.from_cache = true;  // what this rank reports: it did not measure
    }
  }
  RankPeak r;
  r.flops = p.flops;
  if (measures) r.cache_path = p.cache_path, r.cache_key = p.key;
  // fp32 GEMMs name their library when it is oneDNN's (ops/gemm).
  const std::string dtype = in.compute_dtype == at::kBFloat16 ? "bfloat16 "
                            : in.compute_dtype == at::kHalf   ? "float16 "
                            : p.gemm == "onednn"              ? "oneDNN "
                                                              : "";
  r.source = strprintf("measured CPU %sGEMM peak, %d threads%s", dtype.c_str(), p.threads,
                       p.from_cache ? ", cached" : (p.clean ? ", measured now" : ""));
  if (measures && !p.clean)
    r.source += strprintf("; the machine was busy while measuring (CPU share %.0f%%): corrected for it and not "
                          "cached, MFU may be off",
                          100 * p.cpu_share);
  // Emulated ranks share the machine's cores: with more threads on the
  // node than cores, a rank gets only its share of the measured peak, or
  // MFU would be overstated by the oversubscription. The peak was measured
  // with the rank's own thread count, alone on the machine, so
  // peak(t) · cores / (ranks · t) is an upper bound of what one of the
  // ranks sharing the cores can do (one core runs one thread at a time).
  const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  const double wanted = static_cast<double>(in.local_world_size) * p.threads;
  if (r.flops > 0 && wanted > static_cast<double>(cores)) {
    r.flops *= static_cast<double>(cores) / wanted;
    r.source += strprintf("; x%.2f: %d ranks x %d threads share %ld cores", static_cast<double>(cores) / wanted,
                          in.local_world_size, p.threads, cores);
  }
  return r;
}

}  // namespace

RankPeak resolve_rank_peak(const RankPeakInputs& in) {
  if (in.given) return RankPeak{*in.given, "given", "", ""};
  if (in.device.is_cuda()) {
    // The peak of the dtype the matmuls run in (bf16 under FSDP's mixed
    // precision or autocast), not always fp32's: that made bf16 MFU ~15x too high.
    const PeakFlops p = peak_flops_for_device(device_name(in.device), in.compute_dtype,
                                              at::globalContext().allowTF32CuBLAS());
    RankPeak r{p.flops, p.matched + " " + p.precision, "", ""};
    if (!p.known) r.source += "; " + p.warning;
    return r;
  }
  return calibrate_cpu(in);
}

std::string mfu_over_peak_warning(const RankPeak& peak, double mfu_pct, double achieved_flops) {
  bool invalidated = false;
  if (!peak.cache_key.empty())
    invalidated = invalidate_cpu_peak(peak.cache_path, peak.cache_key,
                                      strprintf("a run achieved %.3g FLOP/s per rank, MFU %.1f%%", achieved_flops, mfu_pct));
  return strprintf("warning: MFU %.1f%% > 100%%: the peak (%s) is lower than what this run achieves%s", mfu_pct,
                   peak.source.c_str(),
                   invalidated ? "; the cached calibration is invalidated and will be re-measured next run" : "");
}

}  // namespace titan::metrics
