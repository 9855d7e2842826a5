// Device time of accelerator candidates, for the bench runner (harness/timing/bench_runner.h).
//
// The runner opens a DeviceTimingScope around every timed call. A candidate that runs device work
// (candidates/cuda) asks active_device_timing() and, when a scope is open, measures each launch as
// the GPU timing rules require and adds it to the scope's DeviceCall:
//   - the persisting-L2 lines reset and the L2 flushed (a read of a buffer larger than L2, which
//     leaves no dirty lines to write back) before the launch, outside the measured interval;
//   - a device-wide synchronisation before the start event, the start event on the candidate's
//     stream, the end event on the legacy default stream (which waits for work the candidate left on
//     other blocking streams), then a device-wide synchronisation again;
//   - the SM clock measured just before the launch (the guard spin ahead of the start event: its
//     cycles over the global timer); a launch that ran below 90% of the fastest clock the process has
//     seen is discarded and measured again (up to three times), and counted in `throttled`; one
//     still below after three re-measures is kept and counted in `low_clock`.
// The runner then takes the call's device time as its sample, keeps the host wall time beside it
// (host overhead = 1 - device / wall) and judges the physical bound against the device's memory
// bandwidth instead of this machine's. Outside a scope (verify) candidates run untimed.
#pragma once

#include <string>

namespace dg {

struct DeviceCall {
  double device_s = 0;        // event time of the call's launches, summed
  double launch_wall_s = 0;   // host wall time of the same launches, synchronisation included
  int launches = 0;
  int throttled = 0;          // launches measured again because the SM clock had dropped
  int low_clock = 0;          // launches kept at a dropped clock after three re-measures
  double clock_mhz = 0;       // the SM clock measured beside the last kept launch
  double peak_gbs = 0;        // the device's memory bandwidth (GB/s, 1e9 bytes)
  std::string device;         // its name
};

// One per timed call, on the calling thread; scopes do not nest.
class DeviceTimingScope {
 public:
  DeviceTimingScope();
  ~DeviceTimingScope();
  DeviceTimingScope(const DeviceTimingScope&) = delete;
  DeviceTimingScope& operator=(const DeviceTimingScope&) = delete;
  DeviceCall& call() { return call_; }

 private:
  DeviceCall call_;
  DeviceTimingScope* outer_;
};

// The open scope's record on this thread, or nullptr.
DeviceCall* active_device_timing();

}  // namespace dg
