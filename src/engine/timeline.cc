#include "engine/timeline.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "hora/errors.h"

namespace hora::engine {

std::string eventNameOf(CollectiveKind kind) {
  std::string out(toString(kind));
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string timelinePathFor(const std::string& path, int rank, bool all_ranks) {
  if (!all_ranks) return path;
  const std::string tag = ".rank" + std::to_string(rank);
  const std::string suffix = ".json";
  if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return path.substr(0, path.size() - suffix.size()) + tag + suffix;
  return path + tag;
}

Timeline::Timeline(const std::string& path, int rank, bool mark_cycles)
    : rank_(rank), mark_cycles_(mark_cycles), start_(std::chrono::steady_clock::now()),
      file_(std::fopen(path.c_str(), "w")) {
  if (file_ == nullptr)
    throw InvalidArgumentError("HORA_TIMELINE: cannot create the timeline file '" + path + "'");
  std::fputs("[", file_);
  emit(nlohmann::json{{"name", "process_name"}, {"ph", "M"}, {"pid", rank_},
                      {"args", {{"name", "rank " + std::to_string(rank_)}}}}.dump());
  writer_ = std::thread([this] { writerLoop(); });
}

Timeline::~Timeline() {
  {
    common::MutexLock lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  writer_.join();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

int64_t Timeline::now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
}

int Timeline::laneOf(const std::string& tensor) {
  auto [it, inserted] = lanes_.try_emplace(tensor, static_cast<int>(lanes_.size()) + 1);
  if (inserted)
    emit(nlohmann::json{{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", it->second},
                        {"args", {{"name", tensor}}}}.dump());
  return it->second;
}

void Timeline::begin(const std::string& tensor, std::string_view event, std::string_view args_json) {
  std::string e = "{\"name\":" + nlohmann::json(event).dump() + ",\"ph\":\"B\",\"ts\":" + std::to_string(now()) +
                  ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(laneOf(tensor));
  if (!args_json.empty()) e.append(",\"args\":").append(args_json);
  emit(e + "}");
}

void Timeline::end(const std::string& tensor) {
  emit("{\"ph\":\"E\",\"ts\":" + std::to_string(now()) + ",\"pid\":" + std::to_string(rank_) +
       ",\"tid\":" + std::to_string(laneOf(tensor)) + "}");
}

void Timeline::mark(const std::string& tensor, std::string_view event) {
  emit("{\"name\":" + nlohmann::json(event).dump() + ",\"ph\":\"i\",\"s\":\"t\",\"ts\":" + std::to_string(now()) +
       ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(laneOf(tensor)) + "}");
}

void Timeline::cycleStart() {
  if (mark_cycles_) mark("(cycles)", "CYCLE_START");
}

void Timeline::emit(std::string event) {
  {
    common::MutexLock lock(mutex_);
    pending_.push_back(std::move(event));
  }
  wake_.notify_one();
}

void Timeline::writerLoop() {
  pthread_setname_np(pthread_self(), "hora-timeline");
  std::vector<std::string> batch;
  while (true) {
    bool stop;
    {
      common::MutexLock lock(mutex_);
      wake_.wait(lock.native(), [&]() HORA_REQUIRES(mutex_) { return stop_ || !pending_.empty(); });
      batch.swap(pending_);
      stop = stop_;
    }
    for (const auto& e : batch) {
      std::fputs(first_ ? "\n" : ",\n", file_);
      std::fputs(e.c_str(), file_);
      first_ = false;
    }
    batch.clear();
    std::fflush(file_);  // what was recorded survives a crash of the process
    if (stop) return;
  }
}

}  // namespace hora::engine
