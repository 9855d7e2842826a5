/* A plugin whose candidates attack the harness around them (tests/harness/isolation/sandbox_test.cpp loads it).
 * Each fills its outputs with 1.0 (an INCORRECT row of its own: what is tested is what it does to
 * the harness and to the rows after it), then:
 *   kda_plugin_rewrite_f32  overwrites the second half of its inputs (the --in-fd descriptor, or the
 *                           --in file of older driftgates) after its last run
 *   kda_plugin_hang_f32     joins its grandparent's process group, leaves a setsid grandchild
 *                           (`sleep`), and never returns
 *   kda_plugin_daemon_f32   leaves a setsid grandchild (`sleep`)
 *   kda_plugin_outside_f32  appends a line to every path in $DG_CANARY_TARGET (':'-separated)
 *   kda_plugin_flood_f32    writes $DG_FLOOD_BYTES (default 2 GiB) to stderr, then a last line
 *   kda_plugin_forge_f32    at exit (after the worker wrote its outputs) replaces the worker's
 *                           --out file with a forged one: o of one element, an I32 ht, a third tensor
 * Processes left behind carry DG_ATTACK_MARKER in their environment. Every attempt is reported on
 * stderr as "attack: TARGET: WRITTEN" or "attack: TARGET: <error>".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driftgate/candidate_abi.h"

static const dg_candidate_info candidates[] = {
    {"kda_plugin_rewrite_f32", "kda", "attack", DG_F32, DG_F32, DG_F32, "rewrites its inputs"},
    {"kda_plugin_hang_f32", "kda", "attack", DG_F32, DG_F32, DG_F32, "escapes its group and hangs"},
    {"kda_plugin_daemon_f32", "kda", "attack", DG_F32, DG_F32, DG_F32, "leaves a setsid grandchild"},
    {"kda_plugin_outside_f32", "kda", "attack", DG_F32, DG_F32, DG_F32, "writes outside its directory"},
    {"kda_plugin_flood_f32", "kda", "attack", DG_F32, DG_F32, DG_F32, "floods stderr"},
    {"kda_plugin_forge_f32", "kda", "attack", DG_F32, DG_F32, DG_F32, "forges the outputs file at exit"}};

DRIFTGATE_EXPORT int32_t driftgate_abi_version(void) { return DRIFTGATE_ABI_VERSION; }

DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count) {
  *out = candidates;
  *count = (int32_t)(sizeof candidates / sizeof candidates[0]);
  return 0;
}

static void note(const char* target, int err) {
  fprintf(stderr, "attack: %s: %s\n", target, err ? strerror(err) : "WRITTEN");
  fflush(stderr);
}

/* The value after `flag` on this process's command line, in buf ("" if none). */
static void own_arg(const char* flag, char* buf, size_t size) {
  static char cmd[65536];
  FILE* f = fopen("/proc/self/cmdline", "rb");
  size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0, i = 0;
  if (f) fclose(f);
  cmd[n] = 0;
  buf[0] = 0;
  while (i < n) {
    const char* a = cmd + i;
    i += strlen(a) + 1;
    if (strcmp(a, flag) == 0 && i < n) {
      snprintf(buf, size, "%s", cmd + i);
      return;
    }
  }
}

static void scribble(const char* path) {
  struct stat st;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0) {
    note(path, errno);
    if (fd >= 0) close(fd);
    return;
  }
  {
    size_t n = (size_t)(st.st_size - st.st_size / 2) & ~(size_t)3;
    char* ones = malloc(n ? n : 1);
    size_t i;
    for (i = 0; i + 4 <= n; i += 4) memcpy(ones + i, "\x00\x00\x80\x3f", 4);
    note(path, pwrite(fd, ones, n, st.st_size / 2) > 0 ? 0 : (errno ? errno : EIO));
    free(ones);
  }
  close(fd);
}

static void sleeper(void) {
  const char* m = getenv("DG_ATTACK_MARKER");
  char marker[512];
  char* argv[] = {"sleep", "3600", NULL};
  char* envp[] = {marker, NULL};
  snprintf(marker, sizeof marker, "DG_ATTACK_MARKER=%s", m ? m : "dg-attack");
  execve("/bin/sleep", argv, envp);
  _exit(127);
}

static void leave_behind(void) {
  pid_t c = fork();
  if (c == 0) {
    setsid();
    if (fork() == 0) sleeper();
    _exit(0);
  }
  if (c > 0) waitpid(c, NULL, 0);
}

static void forge(void) {
  static const char header[] =
      "{\"o\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"ht\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]},"
      "\"extra\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
  char path[4096];
  unsigned long long n = sizeof header - 1;
  unsigned char len[8];
  char zeros[16] = {0};
  int i;
  FILE* f;
  own_arg("--out", path, sizeof path);
  if (!path[0]) return;
  for (i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
  f = fopen(path, "wb");
  if (!f) {
    note(path, errno);
    return;
  }
  fwrite(len, 1, 8, f);
  fwrite(header, 1, n, f);
  fwrite(zeros, 1, 16, f);
  fclose(f);
}

DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size) {
  static int calls = 0;
  int32_t i;
  int64_t j, n;
  char buf[4096];
  (void)params_json;
  (void)inputs;
  (void)n_inputs;
  (void)error;
  (void)error_size;
  for (i = 0; i < n_outputs; ++i) {
    for (n = 1, j = 0; j < outputs[i].rank; ++j) n *= outputs[i].shape[j];
    for (j = 0; j < n; ++j) ((float*)outputs[i].data)[j] = 1.0f;
  }
  ++calls;
  if (strcmp(candidate, "kda_plugin_rewrite_f32") == 0) {
    own_arg("--runs", buf, sizeof buf);
    if (calls < (buf[0] ? atoi(buf) : 1)) return 0;
    own_arg("--in-fd", buf, sizeof buf);
    if (buf[0]) {
      char p[4200];
      snprintf(p, sizeof p, "/proc/self/fd/%s", buf);
      scribble(p);
    }
    own_arg("--in", buf, sizeof buf);
    if (buf[0]) scribble(buf);
  } else if (strcmp(candidate, "kda_plugin_hang_f32") == 0) {
    if (setpgid(0, getpgid(getppid())) != 0) note("setpgid", errno);
    leave_behind();
    for (;;) pause();
  } else if (strcmp(candidate, "kda_plugin_daemon_f32") == 0) {
    leave_behind();
  } else if (strcmp(candidate, "kda_plugin_outside_f32") == 0) {
    const char* t = getenv("DG_CANARY_TARGET");
    snprintf(buf, sizeof buf, "%s", t ? t : "");
    for (t = strtok(buf, ":"); t; t = strtok(NULL, ":")) {
      FILE* f = fopen(t, "a");
      if (f) {
        fputs("attack_plugin outside\n", f);
        note(t, fclose(f) == 0 ? 0 : errno);
      } else {
        note(t, errno);
      }
    }
  } else if (strcmp(candidate, "kda_plugin_flood_f32") == 0) {
    const char* b = getenv("DG_FLOOD_BYTES");
    long long left = b ? atoll(b) : (2LL << 30);
    static char block[1 << 20];
    memset(block, 'x', sizeof block);
    block[sizeof block - 1] = '\n';
    while (left > 0) {
      ssize_t w = write(2, block, left < (long long)sizeof block ? (size_t)left : sizeof block);
      if (w <= 0) break;
      left -= w;
    }
    fputs("attack: the end of the flood\n", stderr);
    fflush(stderr);
  } else if (strcmp(candidate, "kda_plugin_forge_f32") == 0) {
    if (calls == 1) atexit(forge);
  }
  return 0;
}
