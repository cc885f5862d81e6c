/* doc_check: the outputs pasted in the docs are what the tool prints today.
 *
 * usage: doc_check USP REPO FILE.md...
 *
 * A fenced block of a doc that shows commands (lines "$ CMD") and their
 * outputs is marked, on the line before its fence:
 *   <!-- checked -->                  numbers as printed, to the last digit
 *   <!-- checked: tolerance 1e-5 -->  numbers with a decimal point within this
 *                                     relative error (a figure the CPU's vector
 *                                     width or the machine's speed changes)
 *   <!-- not checked: WHY -->         e.g. a command that needs GPUs or a cluster
 * A block of commands with neither mark is an error: every pasted output is
 * either checked or says why not. Output that is not in a fenced block (a
 * Markdown table that usp prints, say) follows a mark that names its command:
 *   <!-- output of: CMD -->           the lines up to the next blank line
 *
 * Each command runs under bash in a scratch directory of the doc (commands of
 * one doc share it, so a later one reads what an earlier wrote), where `usp`,
 * every top-level entry of REPO (tests/, tutorials/, ...) and build/release and
 * build/test (both USP's build directory: build/release/tools/usp is USP) resolve. A command line ending in "\" continues on the next; "# exit N" at its
 * end is the exit code it must give (default 0). The lines after it are its
 * expected output: each must match a line of the output (stdout and stderr
 * together), in order, lines in between allowed. Within a line, runs of blanks
 * match runs of blanks, "..." matches any text, and a number with a decimal
 * point may differ by the block's tolerance; everything else must be equal.
 * A line that is only "..." says lines are left out, and matches nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE_MAX_CHARS 4096

typedef struct checker {
    const char *usp, *repo;
    int blocks, commands, failures;
} checker;

typedef struct text_lines {
    char **line;
    int n;
} text_lines;

static void lines_free(text_lines *t)
{
    for (int i = 0; i < t->n; i++) free(t->line[i]);
    free(t->line);
    t->line = NULL, t->n = 0;
}

static void lines_push(text_lines *t, const char *s, size_t len)
{
    t->line = realloc(t->line, (size_t)(t->n + 1) * sizeof *t->line);
    if (!t->line) abort();
    t->line[t->n++] = strndup(s, len);
}

/* Splits `text` at newlines (the last line may lack one). */
static text_lines lines_of(const char *text)
{
    text_lines t = {0};
    for (const char *s = text; *s;) {
        const char *end = strchr(s, '\n');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        lines_push(&t, s, len);
        s += len + (end != NULL);
    }
    return t;
}

static int is_number_start(const char *s) { return isdigit((unsigned char)*s); }

/* Length of the number at s: digits, then "." and digits, then an exponent; *decimal
 * says whether it has a fraction or an exponent (such numbers get the tolerance). */
static size_t number_length(const char *s, int *decimal)
{
    size_t n = 0;
    *decimal = 0;
    while (isdigit((unsigned char)s[n])) n++;
    if (s[n] == '.' && isdigit((unsigned char)s[n + 1])) {
        *decimal = 1;
        for (n++; isdigit((unsigned char)s[n]);) n++;
    }
    size_t e = n;
    if (s[e] == 'e' || s[e] == 'E') {
        e++;
        if (s[e] == '+' || s[e] == '-') e++;
        if (isdigit((unsigned char)s[e])) {
            while (isdigit((unsigned char)s[e])) e++;
            n = e, *decimal = 1;
        }
    }
    return n;
}

/* Does all of `got` match all of `want` (the rules at the top)? */
static int line_matches(const char *want, const char *got, double tolerance)
{
    for (;;) {
        if (strncmp(want, "...", 3) == 0) {
            for (const char *g = got;; g++) {
                if (line_matches(want + 3, g, tolerance)) return 1;
                if (!*g) return 0;
            }
        }
        if (isblank((unsigned char)*want) || !*want) {
            int want_blank = isblank((unsigned char)*want), got_blank = isblank((unsigned char)*got);
            while (isblank((unsigned char)*want)) want++;
            while (isblank((unsigned char)*got)) got++;
            if (!*want) return !*got;
            if (want_blank != got_blank) return 0;
            continue;
        }
        if (is_number_start(want) && is_number_start(got)) {
            int want_decimal, got_decimal;
            size_t wn = number_length(want, &want_decimal), gn = number_length(got, &got_decimal);
            int same = wn == gn && strncmp(want, got, wn) == 0;
            if (!same && want_decimal && got_decimal && tolerance > 0) {
                double w = strtod(want, NULL), g = strtod(got, NULL);
                same = fabs(g - w) <= tolerance * fabs(w);
            }
            if (!same) return 0;
            want += wn, got += gn;
            continue;
        }
        if (*want != *got) return 0;
        want++, got++;
    }
}

/* Runs `command` under bash in `dir`; returns its output (stdout and stderr) and *code its exit code. */
static char *run_command(const char *dir, const char *command, int *code)
{
    char *script = NULL;
    if (asprintf(&script, "cd '%s' && PATH='%s/bin':\"$PATH\" && (%s\n) 2>&1", dir, dir, command) < 0) abort();
    FILE *p = popen(script, "r");
    free(script);
    if (!p) {
        fprintf(stderr, "doc_check: cannot run bash: %s\n", strerror(errno));
        exit(1);
    }
    size_t size = 0, cap = 1 << 16;
    char *out = malloc(cap);
    for (size_t got; (got = fread(out + size, 1, cap - size - 1, p)) > 0;) {
        size += got;
        if (cap - size < 2 && !(out = realloc(out, cap *= 2))) abort();
    }
    out[size] = '\0';
    int status = pclose(p);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return out;
}

/* A scratch directory in which `usp`, the repository's entries and build/{release,test} (USP's build) resolve. */
static char *make_scratch(const checker *c)
{
    char *dir = strdup("/tmp/usp_doc_check_XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "doc_check: cannot make a directory under /tmp: %s\n", strerror(errno));
        exit(1);
    }
    char *script = NULL;
    if (asprintf(&script,
                 "cd '%s' && mkdir -p bin build && ln -s '%s' bin/usp && build=$(dirname \"$(dirname '%s')\") && "
                 "ln -s \"$build\" build/release && ln -s \"$build\" build/test && "
                 "for e in '%s'/*; do case ${e##*/} in build) ;; *) ln -s \"$e\" .;; esac; done",
                 dir, c->usp, c->usp, c->repo) < 0)
        abort();
    if (system(script) != 0) {
        fprintf(stderr, "doc_check: cannot prepare %s\n", dir);
        exit(1);
    }
    free(script);
    return dir;
}

/* Checks one command (`command`, from `file`:`line`) against its expected lines. */
static void check_command(checker *c, const char *dir, const char *file, int line, const char *command,
                          const text_lines *want, double tolerance)
{
    int want_code = 0;
    const char *mark = strstr(command, "# exit ");
    if (mark) want_code = atoi(mark + 7);
    int code;
    char *out = run_command(dir, command, &code);
    text_lines got = lines_of(out);
    const char *missing = NULL;
    int at = 0;
    for (int i = 0; i < want->n && !missing; i++) {
        if (strcmp(want->line[i], "...") == 0) continue;
        while (at < got.n && !line_matches(want->line[i], got.line[at], tolerance)) at++;
        if (at == got.n) missing = want->line[i];
        else at++;
    }
    c->commands++;
    if (code != want_code || missing) {
        c->failures++;
        fprintf(stderr, "%s:%d: $ %s\n", file, line, command);
        if (code != want_code) fprintf(stderr, "  exit code %d, the doc says %d\n", code, want_code);
        if (missing) fprintf(stderr, "  the doc's line\n    %s\n  is not in the output (in its order):\n", missing);
        for (int i = 0; i < got.n; i++) fprintf(stderr, "    | %s\n", got.line[i]);
    }
    lines_free(&got);
    free(out);
}

/* Checks the fenced block of lines [first, end) of a doc. */
static void check_block(checker *c, const char *dir, const char *file, const text_lines *doc, int first, int end,
                        double tolerance)
{
    c->blocks++;
    for (int i = first; i < end;) {
        if (strncmp(doc->line[i], "$ ", 2) != 0) {
            i++;
            continue;
        }
        int line = i + 1;
        char command[LINE_MAX_CHARS] = "";
        for (;;) { /* a trailing backslash continues the command */
            const char *part = doc->line[i++] + (command[0] ? 0 : 2);
            size_t len = strlen(part);
            int more = len > 0 && part[len - 1] == '\\' && i < end;
            strncat(command, part, sizeof command - strlen(command) - 1);
            if (!more) break;
            command[strlen(command) - 1] = ' ';
        }
        text_lines want = {0};
        for (; i < end && strncmp(doc->line[i], "$ ", 2) != 0; i++) lines_push(&want, doc->line[i], strlen(doc->line[i]));
        check_command(c, dir, file, line, command, &want, tolerance);
        lines_free(&want);
    }
}

static int block_has_commands(const text_lines *doc, int first, int end)
{
    for (int i = first; i < end; i++)
        if (strncmp(doc->line[i], "$ ", 2) == 0) return 1;
    return 0;
}

/* Checks every marked block of one doc; an unmarked block of commands is a failure. */
static void check_doc(checker *c, const char *path)
{
    char *full = NULL;
    if (asprintf(&full, "%s/%s", c->repo, path) < 0) abort();
    FILE *f = fopen(full, "r");
    if (!f) {
        fprintf(stderr, "doc_check: cannot read %s: %s\n", full, strerror(errno));
        exit(1);
    }
    char *text = NULL;
    size_t cap = 0;
    ssize_t len = getdelim(&text, &cap, '\0', f);
    fclose(f);
    free(full);
    text_lines doc = lines_of(len > 0 ? text : "");
    free(text);
    char *dir = NULL;
    for (int i = 0; i < doc.n; i++) {
        if (strncmp(doc.line[i], "<!-- output of: ", 16) == 0) {
            int end = i + 1;
            while (end < doc.n && doc.line[end][0]) end++;
            char *command = strdup(doc.line[i] + 16);
            char *close = strstr(command, " -->");
            if (close) *close = '\0';
            text_lines want = {0};
            for (int k = i + 1; k < end; k++) lines_push(&want, doc.line[k], strlen(doc.line[k]));
            if (!dir) dir = make_scratch(c);
            c->blocks++;
            check_command(c, dir, path, i + 1, command, &want, 0);
            lines_free(&want);
            free(command);
            i = end;
            continue;
        }
        if (strncmp(doc.line[i], "```", 3) != 0) continue;
        int end = i + 1;
        while (end < doc.n && strncmp(doc.line[end], "```", 3) != 0) end++;
        const char *mark = i > 0 ? doc.line[i - 1] : "";
        double tolerance = 0;
        if (strncmp(mark, "<!-- checked", 12) == 0) {
            const char *t = strstr(mark, "tolerance ");
            if (t) tolerance = strtod(t + 10, NULL);
            if (!dir) dir = make_scratch(c);
            check_block(c, dir, path, &doc, i + 1, end, tolerance);
        } else if (strncmp(mark, "<!-- not checked:", 17) != 0 && block_has_commands(&doc, i + 1, end)) {
            c->failures++;
            fprintf(stderr, "%s:%d: a block of commands and outputs with no mark: put <!-- checked --> or "
                    "<!-- not checked: why --> on the line before its fence\n", path, i + 1);
        }
        i = end;
    }
    if (dir) {
        char *rm = NULL;
        if (asprintf(&rm, "rm -rf '%s'", dir) < 0 || system(rm) != 0) fprintf(stderr, "doc_check: left %s\n", dir);
        free(rm);
        free(dir);
    }
    lines_free(&doc);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: doc_check USP REPO FILE.md...  (FILE relative to REPO)\n");
        return 2;
    }
    checker c = {.usp = realpath(argv[1], NULL), .repo = realpath(argv[2], NULL)};
    if (!c.usp || !c.repo) {
        fprintf(stderr, "doc_check: %s or %s does not exist\n", argv[1], argv[2]);
        return 2;
    }
    for (int i = 3; i < argc; i++) check_doc(&c, argv[i]);
    printf("doc_check: %d commands in %d checked blocks of %d docs; %d differ%s\n", c.commands, c.blocks,
           argc - 3, c.failures, c.failures ? " (above)" : "");
    free((void *)c.usp), free((void *)c.repo);
    return c.failures ? 1 : 0;
}
