/* Mock nvidia-cuda-mps-control for the MPS tests: answers as NVIDIA's control
 * program does for what kdev sends, and records every command.
 *
 *   nvidia-cuda-mps-control -d   starts the "daemon" of the pipe directory
 *                                $CUDA_MPS_PIPE_DIRECTORY: writes the state
 *                                file <pipe>/mock-mps-daemon (its settings)
 *                                and exits 0 (the real one forks a daemon).
 *   nvidia-cuda-mps-control      reads commands from stdin, one a line (the
 *                                last may lack its newline), answers each:
 *     get_default_active_thread_percentage  prints the percentage ("100.0"
 *                                until set, then e.g. "25.0");
 *     set_default_active_thread_percentage N, set_default_device_pinned_mem_limit
 *                                I L: stored in the state file, no output;
 *     quit                       removes the state file (daemon stopped).
 *   Without a daemon (no state file): "Cannot find MPS control daemon process"
 *   on stderr, exit 1, as the real client.
 *
 * Environment:
 *   KDEV_MOCK_MPS_LOG      file to append each command to, one line
 *                          "<pipe dir>: <command>" ("-d" for a start);
 *   KDEV_MOCK_MPS_CONTROL  a file read at each call; a line "fail <word>"
 *                          makes commands starting with <word> (or "-d")
 *                          print "mock: <word> failed" and exit 1, "hang"
 *                          makes every client call sleep (a daemon that
 *                          stops answering), "down" acts as if no daemon ran.
 * The directories in CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY must
 * exist (the real program needs them too). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *pipe_dir(void)
{
        const char *p = getenv("CUDA_MPS_PIPE_DIRECTORY");
        return p && *p ? p : "/tmp/nvidia-mps";
}

static void record(const char *cmd)
{
        const char *log = getenv("KDEV_MOCK_MPS_LOG");
        if (!log || !*log)
                return;
        FILE *f = fopen(log, "a");
        if (!f)
                return;
        fprintf(f, "%s: %s\n", pipe_dir(), cmd);
        fclose(f);
}

/* Whether the control file has line |what| (or "fail <word>" for |cmd|). */
static bool control(const char *what, const char *cmd)
{
        const char *path = getenv("KDEV_MOCK_MPS_CONTROL");
        FILE *f = path && *path ? fopen(path, "r") : NULL;
        if (!f)
                return false;
        char line[256];
        bool hit = false;
        while (!hit && fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                if (cmd && strncmp(line, "fail ", 5) == 0)
                        hit = strncmp(cmd, line + 5, strlen(line + 5)) == 0;
                else if (!cmd)
                        hit = strcmp(line, what) == 0;
        }
        fclose(f);
        return hit;
}

static char state_path[4096];

static bool read_state(char *pct, size_t size)
{
        FILE *f = fopen(state_path, "r");
        if (!f)
                return false;
        char line[256];
        snprintf(pct, size, "100.0");
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                if (strncmp(line, "thread ", 7) == 0)
                        snprintf(pct, size, "%s.0", line + 7);
        }
        fclose(f);
        return true;
}

static int append_state(const char *line)
{
        FILE *f = fopen(state_path, "a");
        if (!f)
                return -1;
        fprintf(f, "%s\n", line);
        return fclose(f);
}

int main(int argc, char **argv)
{
        snprintf(state_path, sizeof(state_path), "%s/mock-mps-daemon", pipe_dir());
        if (argc > 1 && strcmp(argv[1], "-d") == 0) {
                record("-d");
                if (control(NULL, "-d")) {
                        fprintf(stderr, "mock: -d failed\n");
                        return 1;
                }
                FILE *f = fopen(state_path, "w");
                if (!f) {
                        perror(state_path);
                        return 1;
                }
                fprintf(f, "pid %ld\n", (long)getpid());
                return fclose(f) == 0 ? 0 : 1;
        }
        char line[1024];
        int status = 0;
        while (fgets(line, sizeof(line), stdin)) {
                line[strcspn(line, "\n")] = '\0';
                if (!*line)
                        continue;
                record(line);
                if (control("hang", NULL))
                        for (;;)
                                pause();
                char pct[300];
                if (control("down", NULL) || !read_state(pct, sizeof(pct))) {
                        fprintf(stderr, "Cannot find MPS control daemon process\n");
                        return 1;
                }
                char word[1024];
                snprintf(word, sizeof(word), "%s", line);
                word[strcspn(word, " ")] = '\0';
                if (control(NULL, line)) {
                        printf("mock: %s failed\n", word);
                        return 1;
                }
                if (strcmp(word, "get_default_active_thread_percentage") == 0) {
                        printf("%s\n", pct);
                } else if (strcmp(word, "set_default_active_thread_percentage") == 0) {
                        char s[1100];
                        snprintf(s, sizeof(s), "thread %s", line + strlen(word) + 1);
                        status |= append_state(s) < 0;
                } else if (strcmp(word, "set_default_device_pinned_mem_limit") == 0) {
                        char s[1100];
                        snprintf(s, sizeof(s), "pinned %s", line + strlen(word) + 1);
                        status |= append_state(s) < 0;
                } else if (strcmp(word, "quit") == 0) {
                        unlink(state_path);
                } else {
                        printf("Unknown command: %s\n", line);
                        return 1;
                }
                fflush(stdout);
        }
        return status;
}
