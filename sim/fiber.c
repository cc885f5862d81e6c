/* Fibers over ucontext, with the annotations AddressSanitizer needs to follow
 * stack switches. Stacks are mmap'ed with a guard page below, and reserved
 * lazily (MAP_NORESERVE), so 512 ranks cost address space, not memory. */
#include "sim/fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define USP_ASAN_FIBERS 1
#include <sanitizer/common_interface_defs.h>
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define USP_ASAN_FIBERS 1
#include <sanitizer/common_interface_defs.h>
#endif
#endif

struct sim_fiber {
    ucontext_t context, caller;
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

/* Entered by makecontext, which passes ints: the pointer arrives in two halves. */
static void fiber_entry(unsigned int lo, unsigned int hi)
{
    sim_fiber *f = (sim_fiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
#ifdef USP_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(NULL, &f->caller_stack_bottom, &f->caller_stack_size);
#endif
    f->fn(f->arg);
    f->finished = 1;
#ifdef USP_ASAN_FIBERS
    __sanitizer_start_switch_fiber(NULL, f->caller_stack_bottom, f->caller_stack_size);
#endif
    /* returning follows uc_link back to the scheduler */
}

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
    getcontext(&f->context);
    f->context.uc_stack.ss_sp = stack_bottom(f);
    f->context.uc_stack.ss_size = stack_size(f);
    f->context.uc_link = &f->caller;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->context, (void (*)(void))fiber_entry, 2, (unsigned int)(p & 0xffffffffu),
                (unsigned int)(p >> 32));
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
    swapcontext(&f->caller, &f->context);
#ifdef USP_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

void sim_fiber_yield(sim_fiber *f)
{
#ifdef USP_ASAN_FIBERS
    __sanitizer_start_switch_fiber(&f->fake_stack, f->caller_stack_bottom, f->caller_stack_size);
#endif
    swapcontext(&f->context, &f->caller);
#ifdef USP_ASAN_FIBERS
    __sanitizer_finish_switch_fiber(f->fake_stack, &f->caller_stack_bottom, &f->caller_stack_size);
#endif
}

int sim_fiber_finished(const sim_fiber *f) { return f->finished; }

void sim_fiber_destroy(sim_fiber *f)
{
    if (!f)
        return;
    munmap(f->mapping, f->mapping_bytes);
    free(f);
}
