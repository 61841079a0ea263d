/* Links against an installed libckpt and checks that it is the version its header describes. */
#include <ckpt.h>
#include <stdio.h>

int main(void) {
  if (ckpt_version_number() != CKPT_VERSION_NUMBER) {
    fprintf(stderr, "header %d, library %u\n", CKPT_VERSION_NUMBER, ckpt_version_number());
    return 1;
  }
  printf("consumer linked ckpt %s\n", ckpt_version_string());
  return 0;
}
