/* `usp postmortem DIR`: the report of a run that hung or lost a rank under a
 * real backend, from the flight records its ranks dumped into DIR
 * (core/safety/postmortem.h). The report is the one the simulator prints, on stdout
 * here (it is what the command is for), and --dot draws the same wait-for
 * picture as `usp train --dot`. */
#include <stdio.h>
#include <string.h>

#include "core/safety/flight_recorder.h"
#include "core/safety/postmortem.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "viz/render.h"
#include "viz/wait_graph.h"

static const char *about =
    "Explains a run that hung or lost a rank, from its flight records. Under a real backend\n"
    "(usp train --backend mpi --timeout S --dump-dir DIR) every rank keeps a flight recorder:\n"
    "its last calls and how many calls it issued on each of its groups. A rank whose call has\n"
    "not completed within --timeout seconds, that the launcher stops (another rank died), or\n"
    "whose main function fails or crashes writes DIR/" USP_FLIGHT_FILE_PATTERN ".\n"
    "A rank killed outright (SIGKILL) writes none: the report names it as missing.\n\n"
    "Prints the report the simulator prints for the same fault: the wait chain (who waits for\n"
    "whom, to a cycle or to the rank that never came), the injected faults, and every rank's\n"
    "state and call (op, group, sequence number, call site). The k-th call of every member of\n"
    "a group is one collective, so a rank blocked in call #s on a group waits for each member\n"
    "that issued fewer than s calls on it.\n\n"
    "Exit codes: 0 every rank exited OK; 3 deadlock or collective mismatch; 4 a rank crashed,\n"
    "failed or left no record while others waited; 1 no rank was blocked or lost but some still\n"
    "ran; 2 DIR has no records, or a record is not a whole flight record (named with the field).";

/* --dot: the wait-for picture of the report. */
static usp_status write_dot(const usp_postmortem *pm, const char *dir, const char *path, int *drawn)
{
    char source[512];
    snprintf(source, sizeof source, "usp postmortem of the flight records in %.400s", dir);
    usp_wait_graph g;
    USP_CHECK(usp_postmortem_wait_graph(pm, source, &g));
    *drawn = g.kind != USP_REPORT_NONE;
    usp_status s = *drawn ? viz_write_wait_graph(&g, "--dot", path) : USP_OK;
    usp_wait_graph_free(&g);
    return s;
}

/* Runs the postmortem; *code: the exit code of what the records show. */
static usp_status run(const char *dir, const char *dot, int *code)
{
    if (dot)
        USP_CHECK(viz_check_output("--dot", dot));
    usp_postmortem *pm;
    USP_CHECK(usp_postmortem_load(dir, &pm));
    usp_strbuf text = {0};
    usp_status found = usp_postmortem_report(pm, &text);
    int n = usp_postmortem_world_size(pm), have = 0;
    for (int i = 0; i < n; i++)
        have += usp_postmortem_record(pm, i) != NULL;
    printf("usp postmortem: %s", usp_strbuf_text(&text));
    printf("usp postmortem: flight records of %d of %d ranks in %s\n", have, n, dir);
    usp_strbuf_free(&text);
    *code = (int)found;
    if (dot) { /* after the report: a picture that cannot be written does not hide what the records show */
        int drawn;
        usp_status s = write_dot(pm, dir, dot, &drawn);
        if (s != USP_OK)
            fprintf(stderr, "usp postmortem: %s\n", usp_error_message());
        else if (drawn)
            printf("usp postmortem: wait-for picture in %s\n", dot);
        else
            fprintf(stderr, "usp postmortem: no picture in %s: no rank waited for another\n", dot);
        if (s != USP_OK && found == USP_OK)
            *code = (int)s;
    }
    usp_postmortem_destroy(pm);
    return USP_OK;
}

int cmd_postmortem(int argc, char **argv)
{
    const char *dot = NULL;
    const cli_option options[] = {
        {"--dot", CLI_STRING, &dot, "FILE", "the wait-for picture (.dot, .svg, .png, .pdf), as usp train --dot draws it",
         0, -1},
        {0},
    };
    /* DIR comes first: the option parser knows only options. */
    const char *dir = argc > 2 && argv[2][0] != '-' ? argv[2] : NULL;
    const cli_command c = {.name = "postmortem", .usage = "usp postmortem DIR [--dot FILE]", .about = about,
                           .options = options};
    int done;
    usp_status s = cli_parse(&c, argc, argv, dir ? 3 : 2, &done);
    if (s != USP_OK || done)
        return s != USP_OK ? cli_fail("postmortem", s) : 0;
    if (!dir) {
        usp_error(USP_ERR_CONFIG, "expected the directory of flight records first: usp postmortem DIR [--dot FILE] "
                  "(see usp postmortem --help)");
        return cli_fail("postmortem", USP_ERR_CONFIG);
    }
    int code = 0;
    s = run(dir, dot, &code);
    return s != USP_OK ? cli_fail("postmortem", s) : code;
}
