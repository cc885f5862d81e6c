/* Diagram output (see render.h).
 *
 * One Graphviz context serves the whole process and is never freed: Graphviz
 * 2.42/2.43 (Debian 12, Ubuntu 22.04) has its pango text-layout plugin keep a
 * pointer to the last font name it measured, and that name belongs to the
 * context; freeing a context and creating another leaves the pointer dangling
 * (a heap-use-after-free under AddressSanitizer on the second picture). The
 * context stays reachable, so it is not a leak; renders are not concurrent. */
#include "viz/render.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/atomic_file.h"

#ifdef USP_HAVE_GVC
#include <gvc.h>
#endif

static const struct {
    const char *ext;
    viz_format format;
} extensions[] = {
    {".dot", VIZ_FORMAT_DOT}, {".gv", VIZ_FORMAT_DOT}, {".svg", VIZ_FORMAT_SVG},
    {".png", VIZ_FORMAT_PNG}, {".pdf", VIZ_FORMAT_PDF},
};

usp_status viz_format_of_path(const char *option, const char *path, viz_format *out)
{
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (dot && (!slash || dot > slash))
        for (size_t i = 0; i < sizeof extensions / sizeof *extensions; i++)
            if (strcasecmp(dot, extensions[i].ext) == 0) {
                *out = extensions[i].format;
                return USP_OK;
            }
    return usp_error(USP_ERR_CONFIG,
                     "%s %s: unknown diagram format '%s'; the extension chooses it: .dot (or .gv) for Graphviz "
                     "text, .svg, .png or .pdf for a picture",
                     option, path, dot && (!slash || dot > slash) ? dot : "(no extension)");
}

#ifdef USP_HAVE_GVC
int viz_can_render(void) { return 1; }

usp_status viz_render(const char *dot, viz_format format, char **data, size_t *size)
{
    static const char *names[] = {[VIZ_FORMAT_SVG] = "svg", [VIZ_FORMAT_PNG] = "png", [VIZ_FORMAT_PDF] = "pdf"};
    USP_ASSERT(format != VIZ_FORMAT_DOT, "DOT text needs no rendering");
    *data = NULL;
    *size = 0;
    static GVC_t *gvc; /* see the top of this file */
    if (!gvc && !(gvc = gvContext()))
        return usp_error(USP_ERR_RUNTIME, "Graphviz: cannot create a context (out of memory?)");
    usp_status s = USP_OK;
    /* Graphviz keeps its messages for aglasterr instead of printing them: they go into ours. */
    agerrlevel_t was = agseterr(AGMAX);
    Agraph_t *g = agmemread(dot);
    char *out = NULL;
    unsigned int len = 0;
    if (!g) {
        char *why = aglasterr();
        if (why)
            why[strcspn(why, "\n")] = '\0';
        s = usp_error(USP_ERR_RUNTIME, "Graphviz cannot parse the diagram: %s", why && *why ? why : "syntax error");
        free(why);
    } else if (gvLayout(gvc, g, "dot") != 0) {
        s = usp_error(USP_ERR_RUNTIME, "Graphviz: the dot layout failed (is libgvplugin_dot_layout installed?)");
    } else {
        if (gvRenderData(gvc, g, names[format], &out, &len) != 0 || !out || len == 0)
            s = usp_error(USP_ERR_RUNTIME, "Graphviz cannot render %s: no renderer for it in this installation "
                          "(install the Graphviz cairo plugin, libgvc6-plugins or graphviz)", names[format]);
        else if ((*data = malloc(len)) == NULL)
            s = usp_error(USP_ERR_RUNTIME, "out of memory holding a %u-byte %s picture", len, names[format]);
        else
            memcpy(*data, out, len), *size = len;
        if (out)
            gvFreeRenderData(out);
        gvFreeLayout(gvc, g);
    }
    if (g)
        agclose(g);
    agseterr(was);
    return s;
}
#else
int viz_can_render(void) { return 0; }

usp_status viz_render(const char *dot, viz_format format, char **data, size_t *size)
{
    (void)dot, (void)format;
    *data = NULL;
    *size = 0;
    return usp_error(USP_ERR_CONFIG, "this usp was built without Graphviz (libgvc), so it writes DOT text only: "
                     "name the file .dot, or install libgraphviz-dev and rebuild");
}
#endif

usp_status viz_write_file(const char *option, const char *dot, const char *path)
{
    viz_format format;
    USP_CHECK(viz_format_of_path(option, path, &format));
    char *data = NULL;
    size_t size = strlen(dot);
    if (format != VIZ_FORMAT_DOT) {
        if (!viz_can_render())
            return usp_error(USP_ERR_CONFIG, "%s %s: this usp was built without Graphviz (libgvc), so it writes "
                             "DOT text only: name the file .dot, or install libgraphviz-dev and rebuild",
                             option, path);
        USP_CHECK(viz_render(dot, format, &data, &size));
    }
    usp_atomic_file f;
    usp_status s = usp_atomic_file_open(&f, path);
    if (s == USP_OK) {
        if (fwrite(data ? data : dot, 1, size, f.fp) != size) {
            usp_atomic_file_abort(&f);
            s = usp_error(USP_ERR_RUNTIME, "cannot write %s: short write", path);
        } else {
            s = usp_atomic_file_commit(&f);
        }
    }
    free(data);
    return s;
}

usp_status viz_check_output(const char *option, const char *path)
{
    viz_format format;
    USP_CHECK(viz_format_of_path(option, path, &format));
    if (format != VIZ_FORMAT_DOT && !viz_can_render())
        return usp_error(USP_ERR_CONFIG, "%s %s: this usp was built without Graphviz (libgvc), so it writes DOT "
                         "text only: name the file .dot, or install libgraphviz-dev and rebuild", option, path);
    return USP_OK;
}
