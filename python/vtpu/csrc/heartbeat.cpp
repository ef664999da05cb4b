// heartbeat.cpp — the beats of a tpu_dist group in its store (heartbeat.h).
#include "heartbeat.h"

#include <chrono>
#include <sstream>

namespace vtpu {
namespace {

constexpr auto kBeatEvery = std::chrono::seconds(1);
constexpr auto kBeatWindow = std::chrono::milliseconds(2500);

c10::intrusive_ptr<c10d::Store> own_connection(const c10::intrusive_ptr<c10d::Store>& store) {
  try {
    return store->clone();
  } catch (const std::exception&) {
    return store;  // a store that cannot clone: share its connection
  }
}

}  // namespace

Heartbeat::Heartbeat(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)
    : store_(own_connection(store)), rank_(rank), size_(size), thread_([this] { run(); }) {}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string Heartbeat::diagnose(uint64_t seq) const {
  try {
    auto first = read_beats();
    std::this_thread::sleep_for(kBeatWindow);
    auto second = read_beats();
    std::ostringstream os;
    for (int r = 0; r < size_; r++) {
      if (r == rank_) continue;
      const auto& [b1, s1] = first[r];
      const auto& [b2, s2] = second[r];
      if (b2 < 0) {
        os << "; rank " << r << " never joined the group's heartbeat";
      } else if (b1 == b2) {
        os << "; rank " << r << " stopped answering (its process exited or is frozen; the last collective it "
           << "started was #" << s2 << ", this one is #" << seq << ")";
      } else if (s2 < static_cast<int64_t>(seq)) {
        os << "; rank " << r << " is alive but has not reached this collective (#" << seq << "; it is at #" << s2
           << ")";
      }
    }
    return os.str();
  } catch (const std::exception&) {
    return "; the group's store is unreachable (rank 0 holds it: it has likely exited)";
  }
}

std::vector<std::pair<int64_t, int64_t>> Heartbeat::read_beats() const {
  std::vector<std::pair<int64_t, int64_t>> out(size_, {-1, -1});
  for (int r = 0; r < size_; r++) {
    if (r == rank_ || !store_->check({key(r)})) continue;
    auto v = store_->get(key(r));
    std::istringstream is(std::string(v.begin(), v.end()));
    is >> out[r].first >> out[r].second;
  }
  return out;
}

void Heartbeat::run() {
  int64_t beat = 0;
  uint64_t posted = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    posted = started_.load();
    lock.unlock();
    try {
      std::string v = std::to_string(++beat) + " " + std::to_string(posted);
      store_->set(key(rank_), std::vector<uint8_t>(v.begin(), v.end()));
    } catch (const std::exception&) {
      // the store is gone (its host exited): a later diagnosis says so
    }
    lock.lock();
    cv_.wait_for(lock, kBeatEvery, [&] { return stop_ || started_.load() != posted; });
  }
}

}  // namespace vtpu
