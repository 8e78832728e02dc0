/* make profile-vm: a client shaped like Debian's cmtime -s IP -c 100 (rdma-core
 * 44: every step issued for all ids from the main thread, an event thread
 * counting the events, the main thread yielding until all came), with a
 * callgrind dump at every step boundary, so each step's instructions and the
 * instructions it ran for the first time in the process can be counted.
 * Under qemu's TCG (tests/vm) those two numbers are what a step costs: timings
 * there swing by 10-20 % from run to run, the counts do not.
 * Usage: cmsteps SERVER_IP (a cmtime -b server listens on port 7471). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <valgrind/callgrind.h>
#define N 100
static struct rdma_event_channel *ch;
static struct rdma_cm_id *ids[N];
static volatile int completed;
static void *evth(void *a){
  struct rdma_cm_event *e;
  (void)a;
  while(!rdma_get_cm_event(ch,&e)){
    if(e->event!=RDMA_CM_EVENT_ADDR_RESOLVED && e->event != RDMA_CM_EVENT_ROUTE_RESOLVED &&
       e->event != RDMA_CM_EVENT_ESTABLISHED && e->event != RDMA_CM_EVENT_DISCONNECTED)
      fprintf(stderr,"ev %d st %d\n",e->event,e->status);
    rdma_ack_cm_event(e);
    __sync_fetch_and_add(&completed,1);
  }
  return NULL;
}
static void waitall(void){ while(completed<N) sched_yield(); completed=0; }
int main(int argc,char**argv){
  struct rdma_addrinfo hints={0}, *rai;
  hints.ai_port_space=RDMA_PS_TCP;
  if(rdma_getaddrinfo(argv[1],"7471",&hints,&rai)){perror("gai");return 1;}
  ch=rdma_create_event_channel();
  pthread_t th; pthread_create(&th,NULL,evth,NULL);
  /* let the event thread start and block in rdma_get_cm_event inside "setup":
   * otherwise its start-up (a malloc arena, its stack) lands in whichever step
   * the scheduler picks, for one library and not the other */
  usleep(200000);
  CALLGRIND_DUMP_STATS_AT("setup");
  for(long i=0;i<N;i++) if(rdma_create_id(ch,&ids[i],(void*)i,RDMA_PS_TCP)) {perror("create");return 1;}
  CALLGRIND_DUMP_STATS_AT("create_id");
  for(int i=0;i<N;i++) if(rdma_resolve_addr(ids[i],NULL,rai->ai_dst_addr,2000)){perror("resolve");return 1;}
  waitall();
  CALLGRIND_DUMP_STATS_AT("resolve_addr");
  for(int i=0;i<N;i++) if(rdma_resolve_route(ids[i],2000)){perror("route");return 1;}
  waitall();
  CALLGRIND_DUMP_STATS_AT("resolve_route");
  for(int i=0;i<N;i++){
    struct ibv_qp_init_attr a; memset(&a,0,sizeof a);
    a.cap.max_send_wr=1; a.cap.max_recv_wr=1; a.cap.max_send_sge=1; a.cap.max_recv_sge=1; a.qp_type=IBV_QPT_RC;
    if(rdma_create_qp(ids[i],NULL,&a)){perror("qp");return 1;}
  }
  CALLGRIND_DUMP_STATS_AT("create_qp");
  for(int i=0;i<N;i++){
    struct rdma_conn_param p; memset(&p,0,sizeof p);
    p.responder_resources=1; p.initiator_depth=1; p.retry_count=2;
    if(rdma_connect(ids[i],&p)){perror("connect");return 1;}
  }
  waitall();
  CALLGRIND_DUMP_STATS_AT("connect");
  for(int i=0;i<N;i++){ rdma_disconnect(ids[i]); rdma_destroy_qp(ids[i]); }
  waitall();
  CALLGRIND_DUMP_STATS_AT("disconnect");
  for(int i=0;i<N;i++) rdma_destroy_id(ids[i]);
  CALLGRIND_DUMP_STATS_AT("destroy");
  printf("done\n");
  return 0;
}
