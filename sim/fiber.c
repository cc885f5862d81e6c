/* Fibers, with the annotations AddressSanitizer needs to follow stack
 * switches. Stacks are mmap'ed with a guard page below, and reserved lazily
 * (MAP_NORESERVE), so 512 ranks cost address space, not memory.
 *
 * On x86-64 a switch saves the callee-saved registers on the stack being left
 * and loads the other stack pointer (sim_fiber_switch below): a few
 * instructions, where glibc's swapcontext also saves the signal mask with a
 * system call. A plan of 512 ranks switches millions of times, and that system
 * call was a third of its time. Elsewhere the fibers use ucontext. */
#include "sim/fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define USP_ASAN_FIBERS 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define USP_ASAN_FIBERS 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#endif

#if defined(__x86_64__)
#define USP_FIBER_ASM 1
/* sim_fiber_switch(save, load): pushes rbp, rbx, r12-r15 and the SSE/x87
 * control words, stores rsp in *save, loads rsp = load and pops the same from
 * there. A new fiber's stack is laid out as if it had switched away at the
 * start of fiber_trampoline, with the fiber in r12. */
void sim_fiber_switch(void **save, void *load);
void sim_fiber_trampoline(void);
__asm__(".text\n"
        ".globl sim_fiber_switch\n"
        ".type sim_fiber_switch, @function\n"
        "sim_fiber_switch:\n"
        "  endbr64\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size sim_fiber_switch, .-sim_fiber_switch\n"
        ".globl sim_fiber_trampoline\n"
        ".type sim_fiber_trampoline, @function\n"
        "sim_fiber_trampoline:\n"
        "  endbr64\n"
        "  movq %r12, %rdi\n"
        "  call sim_fiber_main\n"
        "  ud2\n"
        ".size sim_fiber_trampoline, .-sim_fiber_trampoline\n");
#endif

struct sim_fiber {
#ifdef USP_FIBER_ASM
    void *sp, *caller_sp;           /* the saved stack pointers of the fiber and of the scheduler */
#else
    ucontext_t context, caller;
#endif
    void *mapping;
    size_t mapping_bytes, guard_bytes;
    sim_fiber_fn fn;
    void *arg;
    int finished;
#ifdef USP_ASAN_FIBERS
    void *fake_stack;               /* ASan's fake stack of the side being left */
    const void *caller_stack_bottom; /* the scheduler's stack, learnt on first entry */
    size_t caller_stack_size;
#endif
};

static void *stack_bottom(const sim_fiber *f) { return (char *)f->mapping + f->guard_bytes; }
static size_t stack_size(const sim_fiber *f) { return f->mapping_bytes - f->guard_bytes; }

/* A fiber's life: runs fn, then returns to the scheduler for good. */
static void fiber_run(sim_fiber *f)
{
#ifdef USP_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(NULL, &f->caller_stack_bottom, &f->caller_stack_size);
#endif
    f->fn(f->arg);
    f->finished = 1;
#ifdef USP_ASAN_FIBERS
    __sanitizer_start_switch_fiber(NULL, f->caller_stack_bottom, f->caller_stack_size);
#endif
}

#ifdef USP_FIBER_ASM
void sim_fiber_main(sim_fiber *f); /* called from sim_fiber_trampoline only */
void sim_fiber_main(sim_fiber *f)
{
    fiber_run(f);
    sim_fiber_switch(&f->sp, f->caller_sp); /* f->sp: where its frames end, for sim_fiber_destroy */
    __builtin_unreachable();
}

/* The stack of a fiber that has not run: what sim_fiber_switch pops, from the
 * new stack pointer up: control words, r15, r14, r13, r12 = f, rbx, rbp, and
 * the return address, the trampoline. The trampoline's call then finds the
 * stack 16-byte aligned, as the ABI wants at a call. */
static void prepare_stack(sim_fiber *f)
{
    uintptr_t top = ((uintptr_t)stack_bottom(f) + stack_size(f)) & ~(uintptr_t)15;
    uint64_t *frame = (uint64_t *)(top - 64);
#ifdef USP_ASAN_FIBERS /* a new mapping may reuse a dead fiber's stack, whose frames left their poison */
    __asan_unpoison_memory_region(frame, 64);
#endif
    uint32_t control[2];
    __asm__ volatile("stmxcsr %0\n fnstcw %1" : "=m"(control[0]), "=m"(control[1]));
    frame[0] = (uint64_t)control[0] | (uint64_t)(control[1] & 0xffffu) << 32;
    frame[1] = frame[2] = frame[3] = 0;          /* r15, r14, r13 */
    frame[4] = (uint64_t)(uintptr_t)f;           /* r12 */
    frame[5] = frame[6] = 0;                     /* rbx, rbp */
    frame[7] = (uint64_t)(uintptr_t)sim_fiber_trampoline;
    f->sp = frame;
}
#else
/* Entered by makecontext, which passes ints: the pointer arrives in two halves. */
static void fiber_entry(unsigned int lo, unsigned int hi)
{
    fiber_run((sim_fiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
    /* returning follows uc_link back to the scheduler */
}
#endif

usp_status sim_fiber_create(size_t stack_bytes, sim_fiber_fn fn, void *arg, sim_fiber **out)
{
    sim_fiber *f;
    USP_CHECK(usp_calloc((void **)&f, 1, sizeof *f, "a fiber"));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    f->guard_bytes = page;
    f->mapping_bytes = (stack_bytes + page - 1) / page * page + page;
    f->mapping = mmap(NULL, f->mapping_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (f->mapping == MAP_FAILED) {
        free(f);
        return usp_error(USP_ERR_RUNTIME, "cannot map a %zu-byte stack for a simulated rank", stack_bytes);
    }
    mprotect(f->mapping, f->guard_bytes, PROT_NONE);
    f->fn = fn;
    f->arg = arg;
#ifdef USP_FIBER_ASM
    prepare_stack(f);
#else
    getcontext(&f->context);
    f->context.uc_stack.ss_sp = stack_bottom(f);
    f->context.uc_stack.ss_size = stack_size(f);
    f->context.uc_link = &f->caller;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->context, (void (*)(void))fiber_entry, 2, (unsigned int)(p & 0xffffffffu),
                (unsigned int)(p >> 32));
#endif
    *out = f;
    return USP_OK;
}

void sim_fiber_resume(sim_fiber *f)
{
    USP_ASSERT(!f->finished, "resuming a finished fiber");
#ifdef USP_ASAN_FIBERS
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, stack_bottom(f), stack_size(f));
#endif
#ifdef USP_FIBER_ASM
    sim_fiber_switch(&f->caller_sp, f->sp);
#else
    swapcontext(&f->caller, &f->context);
#endif
#ifdef USP_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

void sim_fiber_yield(sim_fiber *f)
{
#ifdef USP_ASAN_FIBERS
    __sanitizer_start_switch_fiber(&f->fake_stack, f->caller_stack_bottom, f->caller_stack_size);
#endif
#ifdef USP_FIBER_ASM
    sim_fiber_switch(&f->sp, f->caller_sp);
#else
    swapcontext(&f->context, &f->caller);
#endif
#ifdef USP_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(f->fake_stack, &f->caller_stack_bottom, &f->caller_stack_size);
#endif
}

int sim_fiber_finished(const sim_fiber *f) { return f->finished; }

void sim_fiber_destroy(sim_fiber *f)
{
    if (!f)
        return;
#if defined(USP_ASAN_FIBERS) && defined(USP_FIBER_ASM)
    /* Frames that never returned (a blocked rank's, or sim_fiber_main's own) keep their redzones' poison
     * past munmap: a later mapping at the same address would then fail in ASan on a valid access. */
    char *top = (char *)stack_bottom(f) + stack_size(f);
    if (f->sp)
        __asan_unpoison_memory_region(f->sp, (size_t)(top - (char *)f->sp));
#endif
    munmap(f->mapping, f->mapping_bytes);
    free(f);
}
