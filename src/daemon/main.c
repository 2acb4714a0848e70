/* PLACEHOLDER: replaced by meshd. */
#include <stdio.h>
int main(void)
{
	fputs("meshd: not built yet\n", stderr);
	return 70;
}
