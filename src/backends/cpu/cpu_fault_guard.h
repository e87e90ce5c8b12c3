/* The CPU fault guard (CUBE_CPU_FAULT_GUARD=1; docs/failures.md, "A CPU
 * kernel that faults"): a kernel that touches memory it may not (SIGSEGV,
 * SIGBUS) on a thread running a launch's cubes ends that launch with
 * LAUNCH_FAILED, naming the kernel, the cube and the faulting address, in
 * place of ending the process. Off by default.
 *
 * How: one process-wide handler for SIGSEGV and SIGBUS (installed on the
 * first guarded launch; the handlers found before it are kept and called for
 * every fault that is not a guarded kernel's), and per thread a guard with a
 * jump buffer and a signal stack of its own (so a kernel that overflows its
 * stack is caught too). The launch loop sets the jump point, arms the guard
 * around its cubes and writes each cube's position into it; the handler jumps
 * back to the loop when the faulting thread is armed and the fault came from
 * the processor (si_code > 0), else hands the signal on.
 * Nothing outside src/backends/cpu/ includes it. */
#ifndef CUBE_BACKENDS_CPU_FAULT_GUARD_H_
#define CUBE_BACKENDS_CPU_FAULT_GUARD_H_

#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/status.h"

typedef struct cube__cpu_guard {
  sigjmp_buf jump;
  volatile sig_atomic_t armed;
  volatile int signo;
  void* volatile addr;
  volatile uint32_t pos[3]; /* the cube running now */
  void* altstack;
} cube__cpu_guard_t;

/* Whether launches are guarded now (the option, read at use). */
bool cube__cpu_guard_wanted(void);

/* The calling thread's guard, the process's handler installed first; made
 * on the thread's first guarded launch and freed when the thread ends.
 * Fails (OUT_OF_MEMORY, or INTERNAL naming the call and errno) when the
 * handler or the signal stack cannot be set up. */
cube_status_t cube__cpu_guard_thread(cube__cpu_guard_t** out);

/* "SIGSEGV" / "SIGBUS" / "signal <n>": a static string. */
const char* cube__cpu_guard_signal_name(int signo);

#endif /* CUBE_BACKENDS_CPU_FAULT_GUARD_H_ */
