# The decode kernel's bandwidth target, read from `driftgate bench` output (scripts/gpu-check.sh):
# every device row of a CUDA decode candidate is followed by a line "... X GB/s of Y GB/s peak ...";
# prints each row's share of the peak, and exits 1 when kda_decode_cuda_f32state on a V-first case
# at B >= 64 is below 70% of it, or when there are fewer than two such rows (the bench did not get
# that far).
#
#   awk -f scripts/hbm-target.awk bench-decode.log
/^kda_decode/ {
  kase = $0
  b = 1
  if (match(kase, /B=[0-9]+/)) b = substr(kase, RSTART + 2, RLENGTH - 2) + 0
  layout = kase ~ /layout=vfirst/ ? "vfirst" : "kfirst"
}
/^  kda_decode_cuda_f32state(_fused)? / { cand = $1 }
/device time \(above\)/ && match($0, /[0-9.]+ GB\/s of [0-9.]+ GB\/s peak/) {
  split(substr($0, RSTART, RLENGTH), f, " ")
  pct = f[4] > 0 ? 100 * f[1] / f[4] : 0
  target = cand == "kda_decode_cuda_f32state" && layout == "vfirst" && b >= 64
  verdict = target ? (pct >= 70 ? "  (target 70%: met)" : "  (target 70%: MISSED)") : ""
  printf "%-32s %-6s B=%-4d %7.0f GB/s of %5.0f GB/s: %5.1f%%%s\n", cand, layout, b, f[1], f[4], pct, verdict
  if (target) { seen++; if (pct < 70) missed++ }
}
END {
  if (seen < 2) { print "the V-first B >= 64 rows of kda_decode_cuda_f32state are missing"; exit 1 }
  exit missed > 0
}
