/* kdevctl kubelet: acts as kubelet's device manager. Serves
 * /v1beta1.Registration/Register on DIR/kubelet.sock, dials registered
 * plugins back (GetDevicePluginOptions, ListAndWatch), keeps capacity and the
 * checkpoint, and admits the pods of a scenario file (GetPreferredAllocation,
 * Allocate, PreStartContainer) with kubelet's rules and error texts.
 *
 * Follows Kubernetes pkg/kubelet/cm/devicemanager (manager.go,
 * plugin/v1beta1/server.go, handler.go, client.go, endpoint.go,
 * pod_devices.go); the decisions live in devmgr.c, this file does the I/O.
 */
#include "kubelet/cmd_kubelet_internal.h"

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: kdevctl kubelet --dir DIR [--scenario FILE] [--hold SEC] [-o table|json]\n"
                "                       [--restart-after SEC] [--dial-timeout SEC]\n"
                "                       [--socket-name NAME] [--state FILE]\n"
                "                       [--pod-resources-socket PATH]\n"
                "                       [--log-level LEVEL] [--log-format FORMAT]\n"
                "\n"
                "Acts as kubelet's device manager on the device-plugin directory DIR:\n"
                "creates DIR (mkdir -p), removes stale Unix sockets in it (not the\n"
                "checkpoint, not directories or other files), serves\n"
                "/v1beta1.Registration/Register on DIR/kubelet.sock, dials each registered\n"
                "plugin back (GetDevicePluginOptions, then ListAndWatch), keeps capacity and\n"
                "allocatable per resource and rewrites DIR/" KDEV_CKPT_FILE " like\n"
                "kubelet.\n"
                "\n"
                "With --scenario, runs the scenario (waits, pod admissions with\n"
                "GetPreferredAllocation / Allocate / PreStartContainer, deletions, restarts,\n"
                "shell commands; format in examples/scenario-reference.yaml), prints the\n"
                "node's resources and every pod's result, and exits 0 (admission errors are\n"
                "results). Without a scenario it serves until SIGINT/SIGTERM (or for --hold\n"
                "SEC) and then prints the node's resources.\n"
                "\n"
                "Options:\n"
                "      --dir DIR            device-plugin directory (required)\n"
                "      --scenario FILE      scenario to run once kubelet.sock is served\n"
                "      --hold SEC           keep serving SEC seconds after the scenario\n"
                "                           (0 = until SIGINT/SIGTERM); without a scenario,\n"
                "                           stop after SEC seconds\n"
                "      --restart-after SEC  simulate one kubelet restart SEC seconds after start\n"
                "      --dial-timeout SEC   how long Register waits for the plugin socket\n"
                "                           (default 10, as kubelet)\n"
                "      --socket-name NAME   file name of the Registration socket in DIR\n"
                "                           (default kubelet.sock), for plugins told\n"
                "                           another kubelet socket path\n"
                "      --state FILE         rewrite FILE (JSON, atomically) with the node's\n"
                "                           resources after every change: registration,\n"
                "                           ListAndWatch update, stream end, restart\n"
                "      --pod-resources-socket PATH\n"
                "                           serve the PodResources API (v1.PodResourcesLister:\n"
                "                           List, GetAllocatableResources, Get) on PATH,\n"
                "                           answered from the admitted pods (default\n"
                "                           DIR/" PODRES_SOCKET_DEFAULT "; \"\" = off)\n"
                "  -o, --output FORMAT      table (default) or json\n"
                "      --log-level LEVEL    debug, info, warn or error (default info); logs\n"
                "                           go to stderr, one line per event\n"
                "      --log-format FORMAT  text (key=value, default) or json (JSON lines)\n"
                "      --log-json           the same as --log-format json\n"
                "  -h, --help               show this help\n"
                "\n"
                "SEC is a number of seconds, fractions allowed (2, 0.5); 0 for --dial-timeout\n"
                "means one try, for --restart-after at once.\n"
                "\n"
                "Signals:\n"
                "  SIGINT, SIGTERM  stop: close the server, remove kubelet.sock, print, exit 0\n"
                "  SIGHUP           simulate a kubelet restart: drop every endpoint, delete\n"
                "                   every socket in DIR, re-read the checkpoint (registered\n"
                "                   resources come back with capacity 0 and a stopped\n"
                "                   endpoint), serve a new kubelet.sock\n"
                "\n"
                "Files:\n"
                "  DIR/kubelet.sock                     the Registration server (removed at exit;\n"
                "                                       DIR/NAME with --socket-name)\n"
                "  DIR/" KDEV_CKPT_FILE "  kubelet's device manager checkpoint\n"
                "  DIR/" PODRES_SOCKET_DEFAULT "           the PodResources server (removed at\n"
                "                                       exit; PATH with --pod-resources-socket)\n"
                "  FILE (--state)                       {\"updates\": N, \"resources\": [...]}, the\n"
                "                                       resources as in -o json\n"
                "\n"
                "Exit status: 0 served / scenario ran; 1 setup failure (directory, socket,\n"
                "scenario file); 2 usage error.\n"
                "\n"
                "Examples:\n"
                "  kdevctl kubelet --dir /tmp/dp --scenario examples/scenario-reference.yaml\n"
                "  kdevctl kubelet --dir /tmp/dp --hold 30 --log-level debug --log-format json\n");
}

void on_log_timer(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        uint64_t ms = kdev_log_limiter_flush(k->peer_log, false);
        if (ms > 0 && !k->stopping)
                uv_timer_start(&k->log_timer, on_log_timer, ms, 0);
}


char *xstrdup(const char *s)
{
        char *d = strdup(s ? s : "");
        if (!d) {
                fprintf(stderr, "kdevctl kubelet: out of memory\n");
                abort();
        }
        return d;
}

char *xasprintf(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *s = NULL;
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n < 0) {
                fprintf(stderr, "kdevctl kubelet: out of memory\n");
                abort();
        }
        return s;
}

/* "rpc error: code = NotFound desc = msg", the grpc-go status text. */
char *rpc_error_text(int status, const char *message)
{
        char name[32];
        return xasprintf("rpc error: code = %s desc = %s",
                         kdev_rpc_code_name(status, name, sizeof(name)), message ? message : "");
}

/* ------------------------------------------------------------------------ */
/* Directory and server                                                     */
/* ------------------------------------------------------------------------ */

/* mkdir -p DIR: new components 0750 (kubelet's mode), whatever the umask. */
static int mkdir_p(const char *dir, struct kdev_err *err)
{
        int rc = kdev_dir_create_all(dir, KDEV_DIR_MODE_PLUGIN, "device-plugin directory", err);
        return rc < 0 ? rc : 0;
}

/* kubelet CleanupPluginDirectory: removes every Unix socket in the directory
 * (stat follows links), leaving the checkpoint, directories and other
 * files. */
static void cleanup_sockets(struct kubelet *k)
{
        DIR *d = opendir(k->dir);
        if (!d) {
                kdev_log_error("cannot read the device-plugin directory", "dir", k->dir, "error",
                               strerror(errno));
                return;
        }
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
                    strcmp(de->d_name, KDEV_CKPT_FILE) == 0)
                        continue;
                char *path = xasprintf("%s/%s", k->dir, de->d_name);
                struct stat st;
                if (stat(path, &st) < 0) {
                        kdev_log_error("Failed to stat file", "path", path, "error",
                                       strerror(errno));
                } else if (S_ISSOCK(st.st_mode)) {
                        if (unlink(path) < 0)
                                kdev_log_error("Failed to remove socket", "path", path, "error",
                                               strerror(errno));
                        else
                                kdev_log_debug("removed stale socket", "path", path);
                }
                free(path);
        }
        closedir(d);
}


static int server_start(struct kubelet *k, struct kdev_err *err)
{
        k->srv = kdev_rpc_server_new(k->loop, NULL);
        if (!k->srv)
                return kdev_err_set(err, ENOMEM, "out of memory");
        int rc = kdev_rpc_server_add_method(k->srv, REGISTER_PATH, false, on_register, k);
        if (rc == 0)
                rc = kdev_rpc_server_listen_unix(k->srv, k->sock_path, err);
        if (rc < 0) {
                kdev_rpc_server_close(k->srv, NULL, NULL);
                k->srv = NULL;
                return rc;
        }
        kdev_log_info("serving Registration", "socket", k->sock_path);
        return 0;
}

/* ------------------------------------------------------------------------ */
/* Shutdown and restart                                                     */
/* ------------------------------------------------------------------------ */

static void close_if_open(uv_handle_t *h)
{
        if (h->loop && !uv_is_closing(h))
                uv_close(h, NULL);
}

static void drop_connections(struct kubelet *k)
{
        while (k->regs) {
                struct reg *r = k->regs;
                if (r->call)
                        kdev_rpc_call_finish(r->call, KDEV_RPC_UNAVAILABLE, "kubelet is stopping");
                r->call = NULL;
                if (r->opt_call) {
                        struct kdev_rpc_client_call *c = r->opt_call;
                        r->os->r = NULL; /* options_done retires the endpoint */
                        r->opt_call = NULL;
                        r->os = NULL;
                        r->ep = NULL;
                        kdev_rpc_client_call_cancel(c);
                }
                reg_finish(r);
        }
        for (struct endpoint *ep = k->eps; ep; ep = ep->next)
                if (!ep->dead)
                        endpoint_retire(ep);
}

static void shutdown_kubelet(struct kubelet *k)
{
        if (k->stopping)
                return;
        kdev_log_info("stopping", "socket", k->sock_path);
        if (k->adm.call)
                kdev_rpc_client_call_cancel(k->adm.call);
        k->stopping = true;
        exec_abort(k);
        drop_connections(k);
        kdev_rpc_server_close(k->srv, NULL, NULL);
        k->srv = NULL;
        unlink(k->sock_path);
        podres_stop(k);
        /* Every client is closed now; the endpoint structures live until the
         * loop has ended, since late callbacks may still name them. */
        for (struct endpoint *ep = k->eps; ep; ep = ep->next) {
                kdev_rpc_client_close(ep->cl);
                ep->cl = NULL;
        }
        close_if_open((uv_handle_t *)&k->sig_int);
        close_if_open((uv_handle_t *)&k->sig_term);
        close_if_open((uv_handle_t *)&k->sig_hup);
        close_if_open((uv_handle_t *)&k->step_timer);
        close_if_open((uv_handle_t *)&k->hold_timer);
        close_if_open((uv_handle_t *)&k->restart_timer);
        close_if_open((uv_handle_t *)&k->reaper);
        close_if_open((uv_handle_t *)&k->log_timer);
        close_if_open((uv_handle_t *)&k->kick);
}

static int restart_kubelet(struct kubelet *k, char **summary)
{
        kdev_log_info("simulating kubelet restart", "dir", k->dir);
        drop_connections(k);
        kdev_rpc_server_close(k->srv, NULL, NULL);
        k->srv = NULL;
        struct kdev_err err = {0};
        int rc = kdev_dm_restart(k->dm, &err);
        if (rc < 0) {
                kdev_log_warn("Continue after failing to read checkpoint file", "error", err.msg);
                if (summary)
                        *summary = xasprintf("restarted; checkpoint not restored: %s", err.msg);
        } else if (summary) {
                *summary = xasprintf("restarted; checkpoint restored: %zu resources, %zu pod "
                                     "device entries",
                                     k->dm->n_res, k->dm->pods.n_entries);
        }
        cleanup_sockets(k);
        rc = server_start(k, &err);
        if (rc < 0) {
                kdev_log_error("cannot serve after restart", "error", err.msg);
                k->exit_code = KDEV_CLI_FAIL;
                shutdown_kubelet(k);
                return rc;
        }
        state_write(k);
        return 0;
}

static void on_signal(uv_signal_t *s, int signum)
{
        struct kubelet *k = s->data;
        if (signum == SIGHUP) {
                if (!k->adm.active)
                        restart_kubelet(k, NULL);
                else
                        kdev_log_warn("restart ignored while a pod is being admitted");
                scenario_kick(k);
                return;
        }
        kdev_log_info("signal received", "signal", signum == SIGINT ? "SIGINT" : "SIGTERM");
        print_results(k);
        shutdown_kubelet(k);
}

static void on_hold_done(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        print_results(k);
        shutdown_kubelet(k);
}

static void on_restart_timer(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        if (k->adm.active) {
                uv_timer_start(t, on_restart_timer, 50, 0);
                return;
        }
        restart_kubelet(k, NULL);
        scenario_kick(k);
}

/* ------------------------------------------------------------------------ */
/* Scenario                                                                 */
/* ------------------------------------------------------------------------ */

/* True when |r| is registered with a live stream. */
static bool res_live(const struct kdev_dm_resource *r)
{
        return r && r->has_endpoint && !r->stopped;
}

/* True when |r| is live and its current plugin has sent a device list: its
 * allocatable count is the plugin's word (not a list restored from the
 * checkpoint, which has no devices). */
static bool res_listed(struct kubelet *k, const struct kdev_dm_resource *r)
{
        if (!res_live(r) || !r->known)
                return false;
        const struct endpoint *ep = current_endpoint(k, r->name);
        return ep && ep->listed;
}

static bool wait_satisfied(struct kubelet *k, const struct kdev_scn_wait *w)
{
        for (size_t i = 0; i < w->n_resources; i++) {
                const struct kdev_dm_resource *r = kdev_dm_find(k->dm, w->resources[i].resource);
                if (!res_live(r))
                        return false;
                size_t alloc;
                kdev_dm_counts(k->dm, r, NULL, &alloc, NULL);
                if (w->resources[i].count > 0 && (!r->known || alloc < w->resources[i].count))
                        return false;
        }
        for (size_t i = 0; i < w->n_allocatable; i++) {
                const struct kdev_dm_resource *r =
                        kdev_dm_find(k->dm, w->allocatable[i].resource);
                if (!res_listed(k, r))
                        return false;
                size_t alloc;
                kdev_dm_counts(k->dm, r, NULL, &alloc, NULL);
                if (alloc != w->allocatable[i].count)
                        return false;
        }
        return true;
}

static char *wait_text(struct kubelet *k, const struct kdev_scn_wait *w, bool ok)
{
        char *s = xstrdup(ok ? "satisfied:" : "timed out:");
        for (size_t i = 0; i < w->n_resources + w->n_allocatable; i++) {
                bool exact = i >= w->n_resources;
                const struct kdev_scn_limit *c =
                        exact ? &w->allocatable[i - w->n_resources] : &w->resources[i];
                const struct kdev_dm_resource *r = kdev_dm_find(k->dm, c->resource);
                size_t alloc = 0;
                if (r)
                        kdev_dm_counts(k->dm, r, NULL, &alloc, NULL);
                char *n;
                if (!exact && c->count == 0)
                        n = xasprintf("%s %s %s", s, c->resource,
                                      r ? state_text(r) : "unregistered");
                else if (!exact)
                        n = xasprintf("%s %s allocatable %zu (wanted %" PRIu64 ")", s,
                                      c->resource, alloc, c->count);
                else if (!res_listed(k, r))
                        /* No live device list: say why instead of a count. */
                        n = xasprintf("%s %s %s (wanted allocatable exactly %" PRIu64 ")", s,
                                      c->resource,
                                      !r ? "unregistered"
                                      : !res_live(r) ? state_text(r)
                                                     : "no device list yet",
                                      c->count);
                else
                        n = xasprintf("%s %s allocatable %zu (wanted exactly %" PRIu64 ")", s,
                                      c->resource, alloc, c->count);
                free(s);
                s = n;
        }
        return s;
}

/* Completes the running wait step when its condition holds now. Called on
 * every ListAndWatch update (so a state that lasts one update is seen) and
 * from scenario_run(); touches only the step's result and timer, so it is
 * safe inside RPC callbacks. Returns true when the running wait is done. */
bool wait_poll(struct kubelet *k)
{
        if (!k->have_scenario || !k->step_running || k->scenario_done || k->stopping)
                return false;
        const struct kdev_scn_step *s = &k->scn.steps[k->step - 1];
        if (s->kind != KDEV_SCN_WAIT)
                return false;
        struct step_result *r = &k->results[k->n_results - 1];
        if (r->done)
                return true;
        if (!wait_satisfied(k, &s->wait))
                return false;
        uv_timer_stop(&k->step_timer);
        r->done = true;
        r->ok = true;
        r->text = wait_text(k, &s->wait, true);
        kdev_log_info("wait satisfied", "result", r->text);
        return true;
}

/* The command as shown in results: control characters escaped (\n, \t,
 * \xHH), so a block scalar stays on one line. */
static char *command_display(const char *cmd)
{
        size_t n = strlen(cmd);
        char *out = malloc(4 * n + 1), *o = out;
        if (!out)
                abort();
        for (const unsigned char *p = (const unsigned char *)cmd; *p; p++) {
                if (*p == '\n') {
                        *o++ = '\\';
                        *o++ = 'n';
                } else if (*p == '\t') {
                        *o++ = '\\';
                        *o++ = 't';
                } else if (*p < 0x20 || *p == 0x7f) {
                        o += sprintf(o, "\\x%02x", *p);
                } else {
                        *o++ = (char)*p;
                }
        }
        *o = 0;
        return out;
}

/* Seconds as written: "10", "0.5", "1.25". */
static void seconds_text(uint64_t ms, char *buf, size_t size)
{
        if (ms % 1000 == 0) {
                snprintf(buf, size, "%" PRIu64, ms / 1000);
                return;
        }
        snprintf(buf, size, "%" PRIu64 ".%03" PRIu64, ms / 1000, ms % 1000);
        size_t l = strlen(buf);
        while (buf[l - 1] == '0')
                buf[--l] = 0;
}

static void exec_closed(uv_handle_t *h)
{
        free(h->data);
}

static void exec_exit(uv_process_t *proc, int64_t exit_status, int term_signal)
{
        struct exec_run *e = proc->data;
        struct kubelet *k = e->k;
        struct step_result *r = &k->results[e->result];
        uv_timer_stop(&k->step_timer);
        char *shown = command_display(r->command);
        r->done = true;
        if (e->timed_out) {
                char sec[32];
                seconds_text(e->timeout_ms, sec, sizeof(sec));
                r->timed_out = true;
                r->term_signal = term_signal;
                r->text = xasprintf("%s: timed out after %s s", shown, sec);
        } else if (term_signal) {
                r->term_signal = term_signal;
                r->text = xasprintf("%s: killed by signal %d", shown, term_signal);
        } else {
                r->exited = true;
                r->exit_code = (int)exit_status;
                r->ok = exit_status == 0;
                r->text = xasprintf("%s: exit %d", shown, r->exit_code);
        }
        free(shown);
        kdev_log_info("exec finished", "result", r->text);
        k->exec = NULL;
        uv_close((uv_handle_t *)proc, exec_closed);
        k->step_running = false;
        scenario_kick(k);
}

/* Starts the exec step |s|: /bin/sh -c COMMAND with kdevctl's environment,
 * stdin /dev/null, stdout and stderr on kdevctl's stderr, in a new session
 * (so a timeout kills the whole process group). Returns true when the child
 * runs (exec_exit() ends the step), false when the step is already done
 * (spawn failed). */
static bool exec_start(struct kubelet *k, const struct kdev_scn_step *s)
{
        struct step_result *r = result_new(k, KDEV_SCN_EXEC);
        r->command = xstrdup(s->command);
        struct exec_run *e = calloc(1, sizeof(*e));
        if (!e)
                abort();
        e->k = k;
        e->result = k->n_results - 1;
        e->timeout_ms = s->timeout_ms;
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int rc = devnull < 0 ? uv_translate_sys_error(errno) : 0;
        if (rc == 0) {
                char *args[] = {"/bin/sh", "-c", s->command, NULL};
                uv_stdio_container_t stdio[3] = {
                        {.flags = UV_INHERIT_FD, .data.fd = devnull},
                        {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
                        {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
                };
                uv_process_options_t o = {
                        .exit_cb = exec_exit,
                        .file = args[0],
                        .args = args,
                        .env = NULL, /* inherit */
                        .flags = UV_PROCESS_DETACHED,
                        .stdio_count = 3,
                        .stdio = stdio,
                };
                fflush(stderr);
                rc = uv_spawn(k->loop, &e->proc, &o);
                close(devnull);
                e->proc.data = e;
                if (rc < 0)
                        uv_close((uv_handle_t *)&e->proc, exec_closed); /* frees e */
        } else {
                free(e);
        }
        if (rc < 0) {
                char *shown = command_display(s->command);
                r->done = true;
                r->text = xasprintf("%s: cannot run /bin/sh: %s", shown, uv_strerror(rc));
                free(shown);
                kdev_log_error("exec failed", "result", r->text);
                return false;
        }
        kdev_log_info("exec started", "command", s->command, KDEV_LOG_INT("pid", e->proc.pid));
        k->exec = e;
        uv_timer_start(&k->step_timer, step_timeout, s->timeout_ms, 0);
        return true;
}

/* SIGKILL to the exec child's process group (the command and whatever it
 * started); -ESRCH when it is gone already. */
static int exec_kill(struct exec_run *e)
{
        if (kill(-e->proc.pid, SIGKILL) == 0)
                return 0;
        return uv_process_kill(&e->proc, SIGKILL);
}

/* kdevctl stops while a command runs: kill it and forget it (the step stays
 * "not finished"). */
void exec_abort(struct kubelet *k)
{
        struct exec_run *e = k->exec;
        if (!e)
                return;
        k->exec = NULL;
        kdev_log_warn("stopping: killing the running exec command",
                      KDEV_LOG_INT("pid", e->proc.pid));
        exec_kill(e);
        uv_close((uv_handle_t *)&e->proc, exec_closed);
}

void step_timeout(uv_timer_t *t)
{
        struct kubelet *k = t->data;
        const struct kdev_scn_step *s = &k->scn.steps[k->step - 1];
        struct step_result *r = &k->results[k->n_results - 1];
        if (s->kind == KDEV_SCN_EXEC) {
                /* exec_exit() ends the step once the child is reaped. */
                if (k->exec && !k->exec->timed_out) {
                        char sec[32];
                        seconds_text(s->timeout_ms, sec, sizeof(sec));
                        kdev_log_warn("exec timed out; killing its process group", "command",
                                      s->command, "timeout_s", sec);
                        k->exec->timed_out = true;
                        exec_kill(k->exec);
                }
                return;
        }
        if (s->kind == KDEV_SCN_WAIT) {
                r->done = true;
                r->ok = false;
                r->text = wait_text(k, &s->wait, false);
                kdev_log_warn("wait timed out", "result", r->text);
        } else {
                r->done = true;
                r->ok = true;
                r->text = xstrdup("done");
        }
        k->step_running = false;
        scenario_kick(k);
}

static void scenario_finished(struct kubelet *k)
{
        k->scenario_done = true;
        kdev_log_info("scenario finished");
        print_results(k);
        if (k->hold_ms < 0) {
                shutdown_kubelet(k);
        } else if (k->hold_ms > 0) {
                uv_timer_start(&k->hold_timer, on_hold_done, (uint64_t)k->hold_ms, 0);
        }
}

/* Runs scenario steps until one has to wait. */
static void scenario_run(struct kubelet *k)
{
        if (!k->have_scenario || k->scenario_done || k->stopping)
                return;
        for (;;) {
                if (k->step_running) {
                        /* A running wait completes when its condition holds. */
                        if (!wait_poll(k))
                                return;
                        k->step_running = false;
                }
                if (k->step >= k->scn.n_steps) {
                        scenario_finished(k);
                        return;
                }
                const struct kdev_scn_step *s = &k->scn.steps[k->step++];
                k->step_running = true;
                kdev_log_debug("scenario step", "kind", kind_text(s->kind),
                               KDEV_LOG_INT("line", s->line));
                struct step_result *r;
                switch (s->kind) {
                case KDEV_SCN_WAIT:
                        result_new(k, KDEV_SCN_WAIT);
                        uv_timer_start(&k->step_timer, step_timeout, s->wait.timeout_ms, 0);
                        continue; /* checked at the top */
                case KDEV_SCN_SLEEP:
                        result_new(k, KDEV_SCN_SLEEP);
                        uv_timer_start(&k->step_timer, step_timeout, s->sleep_ms, 0);
                        return;
                case KDEV_SCN_EXEC:
                        if (exec_start(k, s))
                                return; /* exec_exit kicks */
                        k->step_running = false;
                        continue;
                case KDEV_SCN_POD:
                        admission_start(k, &s->pod);
                        return; /* admission_end kicks */
                case KDEV_SCN_DELETE: {
                        r = result_new(k, KDEV_SCN_DELETE);
                        r->pod_name = xstrdup(s->name);
                        const char *uid = NULL;
                        for (size_t i = 0; i < k->scn.n_steps; i++)
                                if (k->scn.steps[i].kind == KDEV_SCN_POD &&
                                    strcmp(k->scn.steps[i].pod.name, s->name) == 0)
                                        uid = k->scn.steps[i].pod.uid;
                        size_t before = k->dm->pods.n_entries;
                        kdev_dm_set_active(k->dm, uid, false);
                        active_remove(k, uid);
                        free_inactive(k);
                        r->done = true;
                        r->ok = true;
                        r->text = xasprintf("removed, %zu pod device entries freed",
                                            before - k->dm->pods.n_entries);
                        kdev_log_info("pod deleted", "pod", s->name);
                        k->step_running = false;
                        continue;
                }
                case KDEV_SCN_RESTART:
                        r = result_new(k, KDEV_SCN_RESTART);
                        restart_kubelet(k, &r->text);
                        r->done = true;
                        r->ok = true;
                        k->step_running = false;
                        if (k->stopping)
                                return;
                        continue;
                }
        }
}

static void on_kick(uv_idle_t *h)
{
        struct kubelet *k = h->data;
        uv_idle_stop(h);
        k->kick_active = false;
        scenario_run(k);
}

/* Schedules scenario_run() on the next loop turn (never re-entered from
 * inside an RPC callback). */
void scenario_kick(struct kubelet *k)
{
        state_write(k); /* every change of the resources kicks the scenario */
        if (!k->have_scenario || k->stopping || k->kick_active)
                return;
        k->kick_active = true;
        uv_idle_start(&k->kick, on_kick);
}

/* ------------------------------------------------------------------------ */
/* Command                                                                  */
/* ------------------------------------------------------------------------ */

enum {
        OPT_DIR,
        OPT_SCENARIO,
        OPT_HOLD,
        OPT_OUTPUT,
        OPT_RESTART,
        OPT_DIAL,
        OPT_LOG,
        OPT_LOGFORMAT,
        OPT_LOGJSON,
        OPT_SOCKET_NAME,
        OPT_STATE,
        OPT_PODRES,
};

struct args {
        const char *dir;
        const char *scenario;
        const char *socket_name;  /* NULL = kubelet.sock */
        const char *state;        /* --state FILE, or NULL */
        const char *podres;       /* --pod-resources-socket PATH, or NULL */
        int64_t hold_ms;          /* -1 = no --hold */
        int64_t restart_after_ms; /* -1 = no --restart-after */
        uint64_t dial_ms;
        enum kdev_cli_output output;
        enum kdev_log_level log_level;
        bool log_json;
};

static int on_arg(int id, const char *value, void *ud, struct kdev_err *err)
{
        struct args *a = ud;
        uint64_t ms = 0;
        int rc;
        switch (id) {
        case OPT_DIR:
                a->dir = value;
                return 0;
        case OPT_SCENARIO:
                a->scenario = value;
                return 0;
        case OPT_STATE:
                if (!*value)
                        return kdev_err_set(err, EINVAL, "invalid --state \"\" (want a file path)");
                a->state = value;
                return 0;
        case OPT_PODRES:
                a->podres = value;
                return 0;
        case OPT_SOCKET_NAME:
                if (!*value || strchr(value, '/') || strcmp(value, ".") == 0 ||
                    strcmp(value, "..") == 0)
                        return kdev_err_set(err, EINVAL,
                                            "invalid --socket-name \"%s\" (want a file name, "
                                            "without '/')", value);
                a->socket_name = value;
                return 0;
        case OPT_HOLD:
                rc = kdev_cli_parse_seconds(value, "--hold", "until SIGINT/SIGTERM", &ms, err);
                if (rc == 0)
                        a->hold_ms = (int64_t)ms;
                return rc;
        case OPT_RESTART:
                rc = kdev_cli_parse_seconds(value, "--restart-after", "at once", &ms, err);
                if (rc == 0)
                        a->restart_after_ms = (int64_t)ms;
                return rc;
        case OPT_DIAL:
                return kdev_cli_parse_seconds(value, "--dial-timeout", "one try, no retry",
                                              &a->dial_ms, err);
        case OPT_OUTPUT:
                return kdev_cli_parse_output(value, &a->output, err);
        case OPT_LOG:
                if (kdev_log_level_parse(value, &a->log_level) < 0)
                        return kdev_err_set(err, EINVAL,
                                            "invalid --log-level \"%s\" (want "
                                            KDEV_LOG_LEVEL_VALUES ")", value);
                return 0;
        case OPT_LOGFORMAT:
                if (kdev_log_format_parse(value, &a->log_json) < 0)
                        return kdev_err_set(err, EINVAL,
                                            "invalid --log-format \"%s\" (want "
                                            KDEV_LOG_FORMAT_VALUES ")", value);
                return 0;
        case OPT_LOGJSON: /* the older spelling of --log-format json */
                a->log_json = true;
                return 0;
        default:
                return kdev_err_set(err, EINVAL, "unexpected argument \"%s\"", value);
        }
}

static void close_walk(uv_handle_t *h, void *arg)
{
        (void)arg;
        if (!uv_is_closing(h))
                uv_close(h, NULL);
}

int kdevctl_cmd_kubelet(int argc, char **argv)
{
        static const struct kdev_cli_opt opts[] = {
                {"dir", 0, true, OPT_DIR},
                {"scenario", 0, true, OPT_SCENARIO},
                {"hold", 0, true, OPT_HOLD},
                {"output", 'o', true, OPT_OUTPUT},
                {"restart-after", 0, true, OPT_RESTART},
                {"dial-timeout", 0, true, OPT_DIAL},
                {"log-level", 0, true, OPT_LOG},
                {"log-format", 0, true, OPT_LOGFORMAT},
                {"log-json", 0, false, OPT_LOGJSON},
                {"socket-name", 0, true, OPT_SOCKET_NAME},
                {"state", 0, true, OPT_STATE},
                {"pod-resources-socket", 0, true, OPT_PODRES},
        };
        struct args a = {
                .hold_ms = -1, .restart_after_ms = -1, .dial_ms = 10000, .log_level = KDEV_LOG_INFO};
        struct kdev_err err = {0};
        int rc = kdev_cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), on_arg, &a, &err);
        if (rc == 1) {
                usage(stdout);
                return KDEV_CLI_OK;
        }
        if (rc < 0)
                return kdev_cli_usage_error(CMD, "%s", err.msg);
        if (!a.dir)
                return kdev_cli_usage_error(CMD, "missing --dir DIR");
        kdev_log_setup(a.log_level, a.log_json);

        struct kubelet k = {0};
        k.output = a.output;
        k.hold_ms = a.hold_ms;
        k.dial_timeout_ms = a.dial_ms;
        k.exit_code = KDEV_CLI_OK;
        k.state_path = a.state;
        size_t dl = strlen(a.dir);
        while (dl > 1 && a.dir[dl - 1] == '/')
                dl--;
        k.dir = strndup(a.dir, dl);
        if (!k.dir)
                return kdev_cli_fail(CMD, "out of memory");
        if (a.scenario) {
                if (kdev_scenario_load(a.scenario, &k.scn, &err) < 0) {
                        free(k.dir);
                        return kdev_cli_fail(CMD, "%s", err.msg);
                }
                k.have_scenario = true;
        }
        if (mkdir_p(k.dir, &err) < 0) {
                kdev_scenario_clear(&k.scn);
                free(k.dir);
                return kdev_cli_fail(CMD, "%s", err.msg);
        }
        k.sock_path = xasprintf("%s/%s", k.dir,
                                a.socket_name ? a.socket_name : KDEV_CLI_KUBELET_SOCKET_NAME);
        k.ckpt_path = xasprintf("%s/%s", k.dir, KDEV_CKPT_FILE);
        if (!a.podres)
                k.podres_path = xasprintf("%s/%s", k.dir, PODRES_SOCKET_DEFAULT);
        else if (*a.podres)
                k.podres_path = xstrdup(a.podres);
        k.dm = kdev_dm_new(k.ckpt_path);
        if (!k.dm)
                abort();
        /* SIGPIPE is ignored by kdevctl's main (src/cmd/kdevctl.c). */

        uv_loop_t loop;
        uv_loop_init(&loop);
        k.loop = &loop;
        uv_signal_init(&loop, &k.sig_int);
        uv_signal_init(&loop, &k.sig_term);
        uv_signal_init(&loop, &k.sig_hup);
        k.sig_int.data = k.sig_term.data = k.sig_hup.data = &k;
        uv_signal_start(&k.sig_int, on_signal, SIGINT);
        uv_signal_start(&k.sig_term, on_signal, SIGTERM);
        uv_signal_start(&k.sig_hup, on_signal, SIGHUP);
        uv_timer_init(&loop, &k.step_timer);
        uv_timer_init(&loop, &k.hold_timer);
        uv_timer_init(&loop, &k.restart_timer);
        uv_timer_init(&loop, &k.reaper);
        uv_timer_init(&loop, &k.log_timer);
        uv_idle_init(&loop, &k.kick);
        k.step_timer.data = k.hold_timer.data = k.restart_timer.data = k.reaper.data = &k;
        k.log_timer.data = &k;
        k.peer_log = kdev_log_limiter_new(KDEV_LOG_REPEAT_WINDOW_MS); /* NULL: unlimited */
        k.kick.data = &k;

        /* kubelet start: read the checkpoint (allocations and registered
         * resources come back), clean the directory, serve. */
        if (access(k.ckpt_path, F_OK) == 0 && kdev_dm_restart(k.dm, &err) < 0)
                kdev_log_warn("Continue after failing to read checkpoint file", "error", err.msg);
        cleanup_sockets(&k);
        if (server_start(&k, &err) < 0) {
                kdev_cli_fail(CMD, "%s", err.msg);
                k.exit_code = KDEV_CLI_FAIL;
                k.printed = true;
                shutdown_kubelet(&k);
        } else if (podres_start(&k, &err) < 0 && a.podres) {
                kdev_cli_fail(CMD, "%s", err.msg);
                k.exit_code = KDEV_CLI_FAIL;
                k.printed = true;
                shutdown_kubelet(&k);
        } else {
                if (!k.podres_srv && k.podres_path) {
                        /* the default socket is a convenience: go on without it */
                        kdev_log_warn("not serving PodResources", "socket", k.podres_path,
                                      "error", err.msg);
                        free(k.podres_path);
                        k.podres_path = NULL;
                }
                state_write(&k);
                if (a.restart_after_ms >= 0)
                        uv_timer_start(&k.restart_timer, on_restart_timer,
                                       (uint64_t)a.restart_after_ms, 0);
                if (k.have_scenario)
                        scenario_kick(&k);
                else if (a.hold_ms > 0)
                        uv_timer_start(&k.hold_timer, on_hold_done, (uint64_t)a.hold_ms, 0);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        /* Anything left (should be nothing) is closed before the loop goes. */
        uv_walk(&loop, close_walk, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);

        int code = k.exit_code;
        kdev_log_limiter_free(k.peer_log); /* the counts still pending */
        while (k.eps) {
                struct endpoint *ep = k.eps;
                k.eps = ep->next;
                endpoint_free(ep);
        }
        results_free(&k);
        for (size_t i = 0; i < k.n_active; i++)
                free(k.active[i].uid);
        free(k.active);
        kdev_scenario_clear(&k.scn);
        kdev_dm_free(k.dm);
        free(k.dir);
        free(k.sock_path);
        free(k.ckpt_path);
        free(k.podres_path);
        return code;
}
