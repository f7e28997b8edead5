#include "mask_figure.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace ch11 {
namespace {

const char* kRankColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"};

std::string color_of(int64_t rank) { return kRankColors[rank % 8]; }

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

// One panel at (x0, y0): the 2·cp x 2·cp chunk grid of the causal mask
// (query chunks down, key chunks across), each query row in its owner's
// colour, the diagonal blocks half-filled (a causal block is a triangle);
// then one bar per rank, its length its share of the work.
std::string panel(const titan::cp::SequenceLayout& layout, int64_t seq, const std::string& title, double x0, double y0,
                  double cell) {
  const int64_t chunks = layout.num_chunks();
  std::vector<int64_t> owner(static_cast<size_t>(chunks), 0);
  for (int64_t r = 0; r < layout.cp; ++r)
    for (int64_t id : layout.chunks_of(r)) owner[static_cast<size_t>(id)] = r;
  std::string s = fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", x0, y0 - 10) + title +
                  "</text>\n";
  const double side = cell * static_cast<double>(chunks);
  s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\" stroke=\"#999\"/>\n", x0, y0,
           side, side);
  for (int64_t q = 0; q < chunks; ++q) {
    const std::string c = color_of(owner[static_cast<size_t>(q)]);
    const double y = y0 + cell * static_cast<double>(q);
    for (int64_t k = 0; k < q; ++k)
      s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"", x0 + cell * static_cast<double>(k), y,
               cell, cell) +
           c + "\" stroke=\"white\" stroke-width=\"1\"/>\n";
    const double x = x0 + cell * static_cast<double>(q);
    s += fmt("<polygon points=\"%.1f,%.1f %.1f,%.1f ", x, y, x, y + cell) +
         fmt("%.1f,%.1f\" fill=\"", x + cell, y + cell) + c + "\" stroke=\"white\" stroke-width=\"1\"/>\n";
  }
  s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">keys (chunk)</text>\n", x0 + side / 2,
           y0 + side + 14);
  s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" ", x0 - 8, y0 + side / 2) +
       fmt("transform=\"rotate(-90 %.1f %.1f)\">queries (chunk)</text>\n", x0 - 8, y0 + side / 2);
  // Work bars: each rank's unmasked pairs over the mean.
  std::vector<double> work;
  double mean = 0;
  for (int64_t r = 0; r < layout.cp; ++r) work.push_back(causal_work(layout, r, seq / chunks)), mean += work.back();
  mean /= static_cast<double>(layout.cp);
  const double max_work = *std::max_element(work.begin(), work.end());
  const double bx = x0, by = y0 + side + 34, bar_h = 16, bar_max = side - 90;  // room for the label and the value
  s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">attention work per rank (max / mean %.2f)</text>\n", bx,
           by - 4, max_work / mean);
  for (int64_t r = 0; r < layout.cp; ++r) {
    const double w = bar_max * work[static_cast<size_t>(r)] / max_work;
    const double y = by + (bar_h + 4) * static_cast<double>(r);
    s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"", bx + 46, y, w, bar_h) + color_of(r) +
         "\"/>\n";
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">rank %.0f</text>\n", bx, y + 12, static_cast<double>(r));
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%.2f</text>\n", bx + 50 + w, y + 12,
             work[static_cast<size_t>(r)] / mean);
  }
  return s;
}

}  // namespace

double causal_work(const titan::cp::SequenceLayout& layout, int64_t rank, int64_t chunk) {
  // Query chunk q sees q whole chunks before it and the causal triangle of
  // its own: q·c² + c(c+1)/2 query-key pairs.
  double pairs = 0;
  const double c = static_cast<double>(chunk);
  for (int64_t q : layout.chunks_of(rank)) pairs += static_cast<double>(q) * c * c + c * (c + 1) / 2;
  return pairs;
}

double block_work(const titan::cp::SequenceLayout& layout, int64_t q_rank, int64_t k_rank) {
  // Chunk pairs (q, k): below the diagonal whole, on it half (the causal
  // triangle, up to the diagonal's own c/2 pairs), above it nothing.
  double pairs = 0, all = 0;
  for (int64_t q : layout.chunks_of(q_rank))
    for (int64_t k : layout.chunks_of(k_rank)) {
      all += 1;
      pairs += k < q ? 1.0 : k == q ? 0.5 : 0.0;
    }
  return pairs / all;
}

namespace {

// One ring grid at (x0, y0): ranks (rows) by steps (columns), each cell the
// K/V that rank holds at that step, filled as far as the causal mask
// leaves work; each row's total at its end.
std::string ring_panel(const titan::cp::SequenceLayout& layout, const std::string& title, double x0, double y0,
                       double cell) {
  const int64_t cp = layout.cp;
  const double left = 70, gx = x0 + left, gy = y0;
  std::string s = fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", x0, y0 - 26) + title +
                  "</text>\n";
  for (int64_t t = 0; t < cp; ++t)
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">step %.0f</text>\n",
             gx + cell * (static_cast<double>(t) + 0.5), gy - 8, static_cast<double>(t));
  for (int64_t r = 0; r < cp; ++r) {
    const double y = gy + cell * static_cast<double>(r);
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">rank %.0f (Q)</text>\n", x0, y + cell / 2 + 4,
             static_cast<double>(r));
    double row_work = 0;
    for (int64_t t = 0; t < cp; ++t) {
      const int64_t src = ((r - t) % cp + cp) % cp;
      const double w = block_work(layout, r, src);
      row_work += w;
      const double x = gx + cell * static_cast<double>(t);
      s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\" stroke=\"#999\"/>\n", x,
               y, cell, cell);
      if (w > 0)
        s += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"", x + 1, y + cell * (1 - w) + 1,
                 cell - 2, cell * w - 2) +
             color_of(src) + "\" opacity=\"0.85\"/>\n";
      s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">KV %.0f</text>\n", x + cell / 2,
               y + 16, static_cast<double>(src));
      s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%.2f</text>\n", x + cell / 2,
               y + cell - 6, w);
    }
    s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%.2f</text>\n", gx + cell * static_cast<double>(cp) + 8,
             y + cell / 2 + 4, row_work);
  }
  // A step lasts as long as its slowest rank's block: the sum of the
  // columns' maxima against the mean row.
  double slowest = 0, mean = 0;
  for (int64_t t = 0; t < cp; ++t) {
    double m = 0;
    for (int64_t r = 0; r < cp; ++r) m = std::max(m, block_work(layout, r, ((r - t) % cp + cp) % cp));
    slowest += m;
  }
  for (int64_t r = 0; r < cp; ++r)
    for (int64_t q = 0; q < cp; ++q) mean += block_work(layout, r, q);
  mean /= static_cast<double>(cp);
  s += fmt("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">steps paced by the slowest block: %.2f blocks of time for "
           "%.2f of work per rank</text>\n",
           x0, gy + cell * static_cast<double>(cp) + 20, slowest, mean);
  return s;
}

}  // namespace

std::string ring_svg(int64_t cp) {
  const titan::cp::SequenceLayout contiguous{cp, titan::cp::LoadBalance::contiguous};
  const titan::cp::SequenceLayout head_tail{cp, titan::cp::LoadBalance::head_tail};
  const double cell = std::max(40.0, 256.0 / static_cast<double>(cp)), margin = 30, gap = 110;
  const double panel_w = 70 + cell * static_cast<double>(cp) + 40;
  const double width = std::max(820.0, 2 * margin + 2 * panel_w + gap);
  const double top = 96;
  const double height = top + cell * static_cast<double>(cp) + 50;
  std::string s = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" ", width, height) +
                  "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += fmt("<text x=\"%.1f\" y=\"20\" font-size=\"13\">Ring attention over %.0f ranks, causal: at step t rank r "
           "computes its queries against the K/V of rank (r - t) mod n, then passes that K/V on to rank r + 1</text>\n",
           margin, static_cast<double>(cp));
  s += fmt("<text x=\"%.1f\" y=\"38\" font-size=\"11\">each cell: whose K/V (colour, label) and the share of that "
           "block the causal mask leaves to compute (filled height; row totals at the right)</text>\n",
           margin);
  s += ring_panel(contiguous, "contiguous split", margin, top, cell);
  s += ring_panel(head_tail, "head-tail split", margin + panel_w + gap, top, cell);
  s += "</svg>\n";
  return s;
}

std::string causal_split_svg(int64_t cp, int64_t seq) {
  const titan::cp::SequenceLayout contiguous{cp, titan::cp::LoadBalance::contiguous};
  const titan::cp::SequenceLayout head_tail{cp, titan::cp::LoadBalance::head_tail};
  const int64_t chunks = head_tail.num_chunks();
  const double cell = std::max(16.0, 256.0 / static_cast<double>(chunks));
  const double side = cell * static_cast<double>(chunks);
  const double gap = 90, margin = 40;
  const double width = 2 * margin + 2 * side + gap;
  const double height = 60 + side + 50 + (16 + 4) * static_cast<double>(cp) + 20;
  std::string s = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" ", width, height) +
                  "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += fmt("<text x=\"%.1f\" y=\"20\" font-size=\"13\">Causal attention cut into 2 x cp = %.0f chunks over %.0f ranks: "
           "each query row coloured by the rank that holds it (%.0f tokens)</text>\n",
           margin, static_cast<double>(chunks), static_cast<double>(cp), static_cast<double>(seq));
  // The contiguous split has cp chunks: its grid is coarser, over the
  // same square (the same sequence).
  s += panel(contiguous, seq, "contiguous (cp chunks)", margin, 60, side / static_cast<double>(contiguous.num_chunks()));
  s += panel(head_tail, seq, "head-tail (2 x cp chunks: rank i holds i and 2cp-1-i)", margin + side + gap, 60, cell);
  s += "</svg>\n";
  return s;
}

}  // namespace ch11
