// Reports on a tuning run: the text table, the JSON document and the progress line.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <tuple>

#include "kiln/tune/tune_policy.h"

namespace kiln {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string human_bytes(int64_t b) {
  if (b < 1024) return std::to_string(b) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = -1;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

// "123.4 TFLOP/s", "2345.6 GB/s" or "-".
std::string throughput(const CandidateResult& c) {
  if (!c.timed()) return "-";
  const double seconds = c.median_ms * 1e-3;
  if (c.flops > 0.0) return fmt("%.1f TFLOP/s", c.flops / seconds / 1e12);
  if (c.bytes > 0.0) return fmt("%.1f GB/s", c.bytes / seconds / 1e9);
  return "-";
}

// Table order: timed first by (median, workspace, identity); then untimed by (disposition, identity).
std::vector<size_t> table_order(const std::vector<CandidateResult>& cs) {
  std::vector<size_t> order(cs.size());
  std::vector<std::string> ids(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    order[i] = i;
    ids[i] = cs[i].identity();
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = cs[a];
    const auto& y = cs[b];
    if (x.timed() != y.timed()) return x.timed();
    if (x.timed())
      return std::tie(x.median_ms, x.workspace_bytes, ids[a]) < std::tie(y.median_ms, y.workspace_bytes, ids[b]);
    return std::make_tuple(static_cast<int>(x.disposition), ids[a]) <
           std::make_tuple(static_cast<int>(y.disposition), ids[b]);
  });
  return order;
}

// The heuristic's first choice: the smallest non-negative heuristic_rank (ties: first in input order).
std::optional<size_t> heuristic_choice(const std::vector<CandidateResult>& cs) {
  std::optional<size_t> h;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (cs[i].heuristic_rank < 0) continue;
    if (!h || cs[i].heuristic_rank < cs[*h].heuristic_rank) h = i;
  }
  return h;
}

struct Summary {
  std::optional<size_t> winner;
  std::string winner_error;
  std::optional<size_t> heuristic;
  std::optional<size_t> worst;  // slowest passing, timed candidate
};

Summary summarize_candidates(const std::vector<CandidateResult>& cs, const ReportOptions& options) {
  Summary s;
  auto w = pick_winner(cs, options.winner);
  if (w.is_ok()) {
    s.winner = *w;
  } else {
    s.winner_error = w.status().message();
  }
  s.heuristic = heuristic_choice(cs);
  for (size_t i = 0; i < cs.size(); ++i) {
    if (cs[i].disposition != Disposition::kPassed || !cs[i].timed()) continue;
    if (!s.worst || cs[i].median_ms > cs[*s.worst].median_ms) s.worst = i;
  }
  return s;
}

}  // namespace

std::string format_report_table(const std::vector<CandidateResult>& cs, const ReportOptions& options) {
  const Summary sum = summarize_candidates(cs, options);
  const std::vector<size_t> order = table_order(cs);
  size_t id_width = 8;
  for (const auto& c : cs) id_width = std::max(id_width, c.identity().size());

  std::string out;
  if (!options.title.empty()) out += options.title + "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%4s %-2s %-*s %-12s %12s %-28s %16s %12s %-9s\n", "rank", "",
                static_cast<int>(id_width), "plan", "disposition", "median ms", "spread", "throughput", "workspace",
                "clock");
  out += line;
  int rank = 0;
  for (size_t i : order) {
    const auto& c = cs[i];
    std::string marks;
    marks += (sum.winner && *sum.winner == i) ? '*' : ' ';
    marks += (sum.heuristic && *sum.heuristic == i) ? 'H' : ' ';
    std::string median = c.timed() ? fmt("%.4f", c.median_ms) : "-";
    std::string spread = "-";
    if (c.timed()) {
      spread = (std::isfinite(c.rel_error) ? "±" + fmt("%.2f%%", c.rel_error * 100.0) : std::string("±inf")) + " [" +
               fmt("%.4f", c.min_ms) + ".." + fmt("%.4f", c.max_ms) + "]";
    }
    const char* clock = !c.timed() ? "-" : c.throttled ? "THROTTLED" : "ok";
    std::snprintf(line, sizeof line, "%4d %-2s %-*s %-12s %12s %-28s %16s %12s %-9s", ++rank, marks.c_str(),
                  static_cast<int>(id_width), c.identity().c_str(), disposition_name(c.disposition), median.c_str(),
                  spread.c_str(), throughput(c).c_str(), human_bytes(c.workspace_bytes).c_str(), clock);
    out += line;
    if (options.show_messages && !c.message.empty() && (c.disposition != Disposition::kPassed || c.throttled))
      out += "  " + c.message;
    out += "\n";
  }
  out += "marks: * winner (objective " + std::string(objective_name(options.winner.objective)) +
         "), H heuristic's first choice; clock THROTTLED: the SM clock dropped or was capped while sampling\n";
  if (!sum.winner) {
    out += "best: none (" + sum.winner_error + ")\n";
    return out;
  }
  const auto& best = cs[*sum.winner];
  out += "best: " + best.identity() + " " + fmt("%.4f ms", best.median_ms) + "\n";
  if (sum.heuristic) {
    const auto& h = cs[*sum.heuristic];
    if (h.timed()) {
      out += "best vs heuristic: " + fmt("%.2fx", h.median_ms / best.median_ms) + " (heuristic " + h.identity() + " " +
             fmt("%.4f ms", h.median_ms) + ", " + disposition_name(h.disposition) + ")\n";
    } else {
      out += "best vs heuristic: n/a (heuristic " + h.identity() + " " + disposition_name(h.disposition) + ")\n";
    }
  } else {
    out += "best vs heuristic: n/a (no heuristic ranking)\n";
  }
  if (sum.worst) {
    const auto& w = cs[*sum.worst];
    out += "best vs worst: " + fmt("%.2fx", w.median_ms / best.median_ms) + " (worst passing " + w.identity() + " " +
           fmt("%.4f ms", w.median_ms) + ")\n";
  }
  return out;
}

nlohmann::json report_to_json(const std::vector<CandidateResult>& cs, const nlohmann::json& meta,
                              const ReportOptions& options) {
  const Summary sum = summarize_candidates(cs, options);
  nlohmann::json j;
  j["meta"] = meta;
  if (!options.title.empty()) j["title"] = options.title;
  j["objective"] = objective_name(options.winner.objective);
  j["winner"] = sum.winner ? nlohmann::json(cs[*sum.winner].identity()) : nlohmann::json(nullptr);
  nlohmann::json list = nlohmann::json::array();
  for (size_t i : table_order(cs)) list.push_back(candidate_to_json(cs[i]));
  j["candidates"] = std::move(list);

  nlohmann::json s;
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& c : cs)
    counts[disposition_name(c.disposition)] = counts.value(disposition_name(c.disposition), 0) + 1;
  s["counts"] = counts;
  s["best_ms"] = sum.winner ? nlohmann::json(cs[*sum.winner].median_ms) : nlohmann::json(nullptr);
  s["heuristic"] = sum.heuristic ? nlohmann::json(cs[*sum.heuristic].identity()) : nlohmann::json(nullptr);
  s["heuristic_ms"] = nullptr;
  s["best_over_heuristic"] = nullptr;
  s["worst_ms"] = nullptr;
  s["best_over_worst"] = nullptr;
  if (sum.winner) {
    const double best = cs[*sum.winner].median_ms;
    if (sum.heuristic && cs[*sum.heuristic].timed()) {
      s["heuristic_ms"] = cs[*sum.heuristic].median_ms;
      s["best_over_heuristic"] = cs[*sum.heuristic].median_ms / best;
    }
    if (sum.worst) {
      s["worst_ms"] = cs[*sum.worst].median_ms;
      s["best_over_worst"] = cs[*sum.worst].median_ms / best;
    }
  } else {
    s["error"] = sum.winner_error;
  }
  j["summary"] = std::move(s);
  return j;
}

ProgressReporter::ProgressReporter(std::string label, size_t total, std::FILE* out, Mode mode)
    : label_(std::move(label)), total_(total), out_(out), mode_(mode) {
  if (!out_) mode_ = Mode::kSilent;
  if (mode_ == Mode::kAuto) mode_ = isatty(fileno(out_)) ? Mode::kBar : Mode::kLines;
}

ProgressReporter::~ProgressReporter() {
  if (bar_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

void ProgressReporter::update(size_t done, size_t total, const std::string& note) {
  total_ = total;
  update(done, note);
}

void ProgressReporter::update(size_t done, const std::string& note) {
  if (mode_ == Mode::kSilent || finished_) return;
  const size_t shown = total_ ? std::min(done, total_) : done;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (mode_ == Mode::kLines) {
    std::fprintf(out_, "%s: %zu/%zu%s%s (%.1f s)\n", label_.c_str(), shown, total_, note.empty() ? "" : " ",
                 note.c_str(), elapsed);
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 30;
  const double frac = total_ ? static_cast<double>(shown) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::string tail = note.size() > 48 ? note.substr(0, 45) + "..." : note;
  // The time left, from the mean time per finished item so far.
  char eta[48] = "";
  if (shown > 0 && shown < total_)
    std::snprintf(eta, sizeof eta, " ~%.0f s left",
                  elapsed / static_cast<double>(shown) * static_cast<double>(total_ - shown));
  // \r rewrites the line; \033[K clears what a longer previous note left behind.
  std::fprintf(out_, "\r%s [%s] %zu/%zu%s %s\033[K", label_.c_str(), bar.c_str(), shown, total_, eta, tail.c_str());
  std::fflush(out_);
  bar_open_ = true;
}

void ProgressReporter::finish(const std::string& note) {
  if (mode_ == Mode::kSilent || finished_) return;
  update(total_, note.empty() ? "done" : note);
  if (bar_open_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    bar_open_ = false;
  }
  finished_ = true;
}

}  // namespace kiln
