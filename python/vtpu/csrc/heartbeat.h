// heartbeat.h — liveness between the hosts of a tpu_dist group, where no
// shared segment shows a rank's exit: a thread bumps this rank's beat in the
// group's store every second, and when its queue starts a collective, with
// that collective's number. It has its own connection to the store, so a
// program blocked on the store (a store.wait) still beats. When a
// collective fails over TCP, the rank reads every beat twice, a window
// apart, and says which rank stopped beating (exited or hung) or which is
// alive but has not reached this collective.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace vtpu {

class Heartbeat {
 public:
  Heartbeat(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Collective `seq` started on this rank's queue.
  void started(uint64_t seq) {
    started_.store(seq);
    cv_.notify_all();
  }

  // Why collective `seq` failed, as far as the beats tell; "" when they do not.
  std::string diagnose(uint64_t seq) const;

 private:
  std::string key(int r) const { return "beat/" + std::to_string(r); }
  // (beat, collective) per rank; beat -1 for a rank that never beat.
  std::vector<std::pair<int64_t, int64_t>> read_beats() const;
  void run();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
  std::atomic<uint64_t> started_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace vtpu
