#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t n=(size_t)512<<20; int huge=atoi(argv[1]);
  char*p=mmap(0,n+(2<<20),PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*a=(char*)(((size_t)p+(2<<20)-1)&~((size_t)(2<<20)-1));
  if(huge==1) madvise(a,n,MADV_HUGEPAGE); if(huge==0) madvise(a,n,MADV_NOHUGEPAGE);
  memset(a,1,n);
  float*f=(float*)a; size_t m=n/4; double best=1e9; __m512 s=_mm512_setzero_ps();
  for(int r=0;r<15;r++){double t0=now();
    __m512 s0=_mm512_setzero_ps(),s1=s0,s2=s0,s3=s0;
    for(size_t i=0;i<m;i+=64){s0=_mm512_add_ps(s0,_mm512_load_ps(f+i));s1=_mm512_add_ps(s1,_mm512_load_ps(f+i+16));s2=_mm512_add_ps(s2,_mm512_load_ps(f+i+32));s3=_mm512_add_ps(s3,_mm512_load_ps(f+i+48));}
    s=_mm512_add_ps(s,_mm512_add_ps(_mm512_add_ps(s0,s1),_mm512_add_ps(s2,s3)));
    double t=now()-t0; if(t<best)best=t;}
  float out[16];_mm512_storeu_ps(out,s);
  FILE*fp=fopen("/proc/self/smaps_rollup","r");char line[256];long ah=0;while(fgets(line,256,fp)){if(!strncmp(line,"AnonHugePages",13))sscanf(line+14,"%ld",&ah);}
  printf("huge=%d best %.2f GB/s anonhuge %ld kB (%f)\n",huge,n/best/1e9,ah,out[0]);
}
