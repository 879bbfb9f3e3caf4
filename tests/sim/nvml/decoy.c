/*
 * Stand-in for a GPU daemon (nvidia-persistenced, nv-hostengine): holds the device files
 * named on its command line (default /dev/nvidiactl) open until SIGTERM, then exits 0.
 *
 * Copyright: (c) 2026, gpuops maintainers
 * GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
 * SPDX-License-Identifier: GPL-3.0-or-later
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_term(int sig)
{
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv)
{
    const char *fallback[] = {"/dev/nvidiactl"};
    const char **paths = argc > 1 ? (const char **)argv + 1 : fallback;
    int i, count = argc > 1 ? argc - 1 : 1;

    signal(SIGTERM, on_term);
    for (i = 0; i < count; i++) {
        if (open(paths[i], O_RDWR) < 0) {
            fprintf(stderr, "%s: cannot open %s: %m\n", argv[0], paths[i]);
            return 1;
        }
    }
    for (;;)
        pause();
}
