#pragma once
/// @file
/// @brief Pipeline steps drawn: the events a PipelineRuntime recorded (or
/// a simulated run of the same schedule) as an ASCII chart — one line
/// per rank, time left to right, each compute action a bracketed cell
/// `[F0][F1] ... [B1][B0]` placed at the column of its start, so a bubble
/// is a run of blanks — and as profiling::TimelineBar rows for the SVG
/// renderer.

#include <string>
#include <vector>

#include "titan/parallel/pipeline/runtime.hpp"
#include "titan/parallel/pipeline/simulate.hpp"
#include "titan/profiling/timeline.hpp"

namespace titan::pp {

/// @brief True when some rank ran more than one stage (interleaved, ZBV):
/// then labels carry the stage.
bool has_multi_stage_ranks(const std::vector<PipelineEvent>& events);

/// @brief A compute action's short name: type and micro-batch ("F0", "B3",
/// "I2", "W1"; communication "SEND_F0", "RECV_B3"), with the stage in
/// front when `with_stage` ("s4F0").
std::string cell_label(const Action& a, bool with_stage);

/// @brief One bar per event, row "rank r" (rows in rank order), label
/// cell_label (with the stage when has_multi_stage_ranks), kind
/// "forward", "backward", "backward_input", "backward_weight" for compute
/// and "comm" for sends and receives (render_svg colours each).
std::vector<profiling::TimelineBar> timeline_bars(const std::vector<PipelineEvent>& events);

/// @brief An ASCII chart of the compute events of a step, one line
/// per rank ("rank 0: [F0][F1]      [B1][B0]"), time 0 .. the step's last
/// event over `width` characters. Each cell spans the columns of its
/// interval: "[" label "]" padded with '-' when the label fits, the type
/// letter alone when it does not; idle time is blank. On multi-stage
/// ranks the labels carry the stage ("[s4F0]") when every cell has room
/// for it; otherwise a rank's second stage is drawn in round brackets
/// ("(F0)"), a third in braces, and a legend line says so. A scale line
/// closes the chart.
std::string render_pipeline_ascii(const std::vector<PipelineEvent>& events, int pp, int width = 100);

/// @brief A simulated run (simulate(spec, compute)) as events: rank r's
/// i-th compute action over [start, end) of the simulation, in its time
/// units (shown as "units" on the scale).
std::vector<PipelineEvent> simulated_events(const SimulatedRun& sim, const std::vector<RankActions>& compute);

/// @brief The ideal chart: render_pipeline_ascii of simulated_events, at
/// the same width as the measured one so the two can be read together.
std::string render_pipeline_ascii(const SimulatedRun& sim, const std::vector<RankActions>& compute, int width = 100);

}  // namespace titan::pp
