// Pipeline timelines drawn (parallel/pipeline/timeline.hpp) from hand-made
// events: cells appear in time order at the column of their start, idle
// time is blank, labels drop the stage (then the number) when a cell is
// too narrow, multi-stage ranks get "s<stage>" labels, the SVG carries
// every label, and a simulated run draws the textbook GPipe picture.
#include <gtest/gtest.h>

#include <string>

#include "titan/parallel/pipeline/timeline.hpp"

namespace {

using namespace titan::pp;

PipelineEvent ev(int rank, ActionType t, int stage, int mb, double start, double end) {
  return {rank, Action{t, stage, mb}, start, end};
}

// The line of rank `r` without its "rank r: " prefix.
std::string line_of(const std::string& chart, int r) {
  const std::string tag = "rank " + std::to_string(r) + ": ";
  const size_t at = chart.find(tag);
  if (at == std::string::npos) return "<missing>";
  const size_t from = at + tag.size();
  return chart.substr(from, chart.find('\n', from) - from);
}

// Two ranks, two micro-batches, GPipe-shaped, 10 us per forward, 20 per
// backward, on a 100-us span drawn 100 characters wide: 1 column = 1 us.
std::vector<PipelineEvent> gpipe_events() {
  using T = ActionType;
  return {
      ev(0, T::Forward, 0, 0, 0, 10),    ev(0, T::Forward, 0, 1, 10, 20),
      ev(0, T::SendForward, 0, 0, 10, 11),
      ev(1, T::Forward, 1, 0, 10, 20),   ev(1, T::Forward, 1, 1, 20, 30),
      ev(1, T::Backward, 1, 1, 30, 50),  ev(1, T::Backward, 1, 0, 50, 70),
      ev(0, T::Backward, 0, 1, 50, 70),  ev(0, T::Backward, 0, 0, 80, 100),
  };
}

TEST(PipelineTimeline, CellsInOrderAtTheirStartColumn) {
  const std::string chart = render_pipeline_ascii(gpipe_events(), 2, 100);
  const std::string r0 = line_of(chart, 0), r1 = line_of(chart, 1);
  EXPECT_EQ(r0.substr(0, 20), "[F0------][F1------]");
  EXPECT_EQ(r1.substr(10, 20), "[F0------][F1------]");
  EXPECT_EQ(r1.substr(30, 40), "[B1----------------][B0----------------]");
  EXPECT_EQ(r0.find("[B1"), 50u);
  EXPECT_EQ(r0.find("[B0"), 80u);
  EXPECT_LT(r0.find("[F0"), r0.find("[F1"));
  // Communication is not drawn in the ASCII chart.
  EXPECT_EQ(chart.find("SEND"), std::string::npos);
  // The scale line gives the span in ms.
  EXPECT_NE(chart.find("0.1 ms"), std::string::npos) << chart;
}

TEST(PipelineTimeline, IdleIsBlank) {
  const std::string chart = render_pipeline_ascii(gpipe_events(), 2, 100);
  const std::string r0 = line_of(chart, 0), r1 = line_of(chart, 1);
  EXPECT_EQ(r0.substr(20, 30), std::string(30, ' '));  // rank 0 waits for rank 1's backwards
  EXPECT_EQ(r0.substr(70, 10), std::string(10, ' '));
  EXPECT_EQ(r1.substr(0, 10), std::string(10, ' '));  // rank 1 waits for the first forward
  EXPECT_EQ(r1.size(), 70u);                           // and is idle (trailing blanks trimmed) at the end
}

TEST(PipelineTimeline, NarrowCellsShortenTheirLabel) {
  using T = ActionType;
  // Rank 0 runs stages 0 and 2 (multi-stage). Some cells are too narrow
  // for "s2F0": no cell gets the stage, the second stage's cells get
  // round brackets instead, and the narrowest the letter alone.
  std::vector<PipelineEvent> e = {ev(0, T::Forward, 0, 0, 0, 10), ev(0, T::Forward, 2, 0, 10, 13),
                                  ev(0, T::BackwardInput, 2, 0, 13, 15), ev(0, T::BackwardWeight, 2, 0, 15, 16),
                                  ev(0, T::Backward, 0, 0, 90, 100)};
  EXPECT_TRUE(has_multi_stage_ranks(e));
  const std::string chart = render_pipeline_ascii(e, 1, 100);
  const std::string r0 = line_of(chart, 0);
  EXPECT_EQ(r0.substr(0, 10), "[F0------]");
  EXPECT_EQ(r0.substr(10, 3), "(F)");  // 3 columns: the letter only
  EXPECT_EQ(r0.substr(13, 2), "()");
  EXPECT_EQ(r0.substr(15, 1), "W");
  EXPECT_EQ(r0.substr(90, 10), "[B0------]");
  EXPECT_NE(chart.find("(..) its second"), std::string::npos);
  // Wide cells: every label carries its stage.
  std::vector<PipelineEvent> wide = {ev(0, T::Forward, 0, 0, 0, 10), ev(0, T::Forward, 2, 0, 10, 20),
                                     ev(0, T::Backward, 2, 0, 20, 40), ev(0, T::Backward, 0, 0, 40, 60)};
  EXPECT_EQ(line_of(render_pipeline_ascii(wide, 1, 60), 0),
            "[s0F0----][s2F0----][s2B0--------------][s0B0--------------]");
  EXPECT_EQ(cell_label(Action{T::Forward, 4, 0}, true), "s4F0");
  EXPECT_EQ(cell_label(Action{T::BackwardInput, 4, 2}, false), "I2");
  EXPECT_FALSE(has_multi_stage_ranks(gpipe_events()));
}

TEST(PipelineTimeline, SvgCarriesEveryLabelAndKind) {
  const auto bars = timeline_bars(gpipe_events());
  ASSERT_EQ(bars.size(), gpipe_events().size());
  EXPECT_EQ(bars.front().row, "rank 0");  // rows in rank order
  EXPECT_EQ(bars.back().row, "rank 1");
  const std::string svg = titan::profiling::render_svg(bars, "GPipe");
  for (const char* label : {"F0", "F1", "B0", "B1", "SEND_F0"})
    EXPECT_NE(svg.find(std::string(">") + label + ":"), std::string::npos) << label;
  EXPECT_NE(svg.find("#59a14f"), std::string::npos);  // backward's colour
  EXPECT_NE(svg.find("#f28e2b"), std::string::npos);  // comm's
}

TEST(PipelineTimeline, SimulatedGPipeIsTheTextbookPicture) {
  ScheduleSpec spec;
  spec.kind = ScheduleKind::GPipe;
  spec.pp = 2;
  spec.microbatches = 2;
  const auto compute = compute_actions(spec);
  // Unit costs, forward = backward: 6 units, 4 characters per unit.
  const SimulatedRun sim = simulate(spec, compute, ActionCosts{1, 1, 1, 1});
  const std::string chart = render_pipeline_ascii(sim, compute, 24);
  EXPECT_EQ(line_of(chart, 0), "[F0][F1]        [B1][B0]");
  EXPECT_EQ(line_of(chart, 1), "    [F0][F1][B1][B0]");
  EXPECT_NE(chart.find("units"), std::string::npos);
}

}  // namespace
