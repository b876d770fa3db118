/* Which of the syscalls sandpit's unit tests need this qemu-user emulates, for tests/aarch64.sh.
 * Built with aarch64-linux-gnu-gcc and run under qemu-aarch64-static: prints one line per
 * syscall, "NAME ok" or "NAME ENOSYS" (or another error), and exits 0. A real aarch64 kernel
 * (>= 5.6) has both; qemu 7.2 (Debian 12) implements neither. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void report(const char *name, long rc) {
  if (rc >= 0)
    printf("%s ok\n", name);
  else
    printf("%s %s\n", name, errno == ENOSYS ? "ENOSYS" : strerror(errno));
}

int main(void) {
  /* openat2(2), as util::openat2 calls it: the workspace transfer and the disk walk. */
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_BENEATH};
  report("openat2", syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how));
  /* process_vm_readv(2) on ourselves, as the metadata supervisor reads a sandbox's paths. */
  char src[] = "x", dst[2] = {0};
  struct iovec local = {dst, 1}, remote = {src, 1};
  report("process_vm_readv", process_vm_readv(getpid(), &local, 1, &remote, 1, 0));
  /* posix_spawn of a missing program, as std::process::Command spawns: a kernel reports ENOENT
   * to the parent; qemu-user runs glibc's CLONE_VM|CLONE_VFORK child as a plain fork, so the
   * child's exec error never reaches the parent ("spawn_errors ENOSYS": the tests that expect a
   * spawn error are skipped). */
  char *argv[] = {"/nonexistent/sandpit-qemu-probe", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
  if (rc == ENOENT) {
    printf("spawn_errors ok\n");
  } else {
    if (rc == 0)
      waitpid(pid, NULL, 0);
    printf("spawn_errors ENOSYS\n");
  }
  return 0;
}
