/* bench/train --threads (see train_threads.c). */
#ifndef USP_BENCH_TRAIN_THREADS_H
#define USP_BENCH_TRAIN_THREADS_H

/* Prints usp train's meshes at the default thread count beside one thread (a table, or one JSON
 * object per mesh); 0, or the failed run's status. */
int bench_train_threads(int json);

#endif
