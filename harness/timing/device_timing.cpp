#include "harness/timing/device_timing.h"

namespace dg {
namespace {
thread_local DeviceTimingScope* t_scope = nullptr;
thread_local DeviceCall* t_call = nullptr;
}  // namespace

DeviceTimingScope::DeviceTimingScope() : outer_(t_scope) {
  t_scope = this;
  t_call = &call_;
}

DeviceTimingScope::~DeviceTimingScope() {
  t_scope = outer_;
  t_call = outer_ ? &outer_->call() : nullptr;
}

DeviceCall* active_device_timing() { return t_call; }

}  // namespace dg
