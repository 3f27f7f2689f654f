#include <stdio.h>

int main(void)
{
        fprintf(stderr, "kdev-plugin: not implemented yet\n");
        return 1;
}
