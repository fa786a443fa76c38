/* xcoll-fr - read every rank's flight recorder dump of a job and say who
 * holds it up (PyTorch's fr_trace for xcoll).
 *
 *   xcoll-fr [--json] [--last N] DIR|FILE...
 *
 * Dumps (docs/flight-recorder.md) are grouped by job and communicator. For
 * each communicator it prints, on one screen: the first call at which the
 * ranks disagree (another collective, count, dtype, op or root at one
 * sequence number), or else the call some ranks are stuck in and the ranks
 * that never entered it (for a send or recv: the peer that never posted the
 * matching call), or the rank at the end of the chain of waits (a rank that
 * left no dump: stopped or killed); the ranks that are stuck, where, and on
 * which peer each waits; and a table per rank of its last calls. --json
 * prints the same as one JSON object. Exit status: 0 when the dumps were
 * read (whatever they say), 1 when none could be, 2 for bad options. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stdarg.h>

/* Text for people, cut where it does not fit: snprintf through vsnprintf,
 * so that the compiler does not warn of truncation we accept. */
static int format(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int format(char *out, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, size, fmt, ap);
  va_end(ap);
  return n;
}

#define FORMAT_NAME "xcoll-flight-recorder"
#define FORMAT_VERSION 1

/* One entry of a dump, as the analysis needs it. */
typedef struct call {
  long long id, seq;
  const char *name;  /* "allreduce", "send", "group", ... */
  const char *dtype, *op, *state, *status, *algorithm;
  long long count;
  int root; /* -1: none */
  int peer; /* send, recv: the other rank; -1 otherwise */
  int p2p_count;
  struct {
    const char *name;
    int peer;
    long long nth, count;
  } p2p[4];
  int has_progress, step, recv_from, send_to;
  /* A device-driven backend's op (nccl_like): its channels in the dump,
   * and the one that names where it waits (a receive first, as for
   * progress; -1 none): that channel, its peer and direction. */
  int channels, wait_channel, wait_peer, wait_send;
  const char *wait_transport;
  long long wait_done, wait_steps; /* steps done that way, of the total */
  double started_us, ended_us;
} call;

typedef struct rank_dump {
  cJSON *root;
  const char *path, *reason, *broken_status, *broken_message;
  int present;
  int world_size;
  double dumped_us;
  int ncalls;
  call *calls;
  /* p2p_counts: sends to / receives from each peer so far */
  long long *sends, *recvs;
} rank_dump;

typedef struct comm_dumps {
  char job[300];
  long long comm_id;
  int world_size;
  rank_dump *ranks; /* world_size, filled as dumps are read */
} comm_dumps;

static comm_dumps *comms;
static int ncomms;

static const char *str_of(const cJSON *o, const char *key, const char *def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : def;
}
static double num_of(const cJSON *o, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t size = 0, used = 0;
  char *text = NULL;
  for (;;) {
    if (used + 4096 + 1 > size) {
      size = (size + 4096) * 2;
      char *grown = realloc(text, size);
      if (!grown) {
        free(text);
        fclose(f);
        return NULL;
      }
      text = grown;
    }
    size_t n = fread(text + used, 1, size - used - 1, f);
    used += n;
    if (n == 0)
      break;
  }
  fclose(f);
  text[used] = '\0';
  return text;
}

static void parse_calls(rank_dump *r, const cJSON *entries) {
  int n = cJSON_GetArraySize(entries);
  r->calls = calloc((size_t)(n > 0 ? n : 1), sizeof *r->calls);
  if (!r->calls)
    return;
  const cJSON *e;
  cJSON_ArrayForEach(e, entries) {
    call *c = &r->calls[r->ncalls++];
    c->id = (long long)num_of(e, "id", 0);
    c->seq = (long long)num_of(e, "seq", -1);
    c->name = str_of(e, "call", "?");
    c->dtype = str_of(e, "dtype", "");
    c->op = str_of(e, "op", "");
    c->state = str_of(e, "state", "?");
    c->status = str_of(e, "status", "?");
    c->algorithm = str_of(e, "algorithm", "");
    c->count = (long long)num_of(e, "count", -1);
    c->root = (int)num_of(e, "root", -1);
    c->peer = (int)num_of(e, "peer", -1);
    c->started_us = num_of(e, "started_us", 0);
    c->ended_us = num_of(e, "ended_us", 0);
    const cJSON *p2p = cJSON_GetObjectItemCaseSensitive(e, "p2p"), *p;
    cJSON_ArrayForEach(p, p2p) {
      if (c->p2p_count >= 4)
        break;
      c->p2p[c->p2p_count].name = str_of(p, "call", "?");
      c->p2p[c->p2p_count].peer = (int)num_of(p, "peer", -1);
      c->p2p[c->p2p_count].nth = (long long)num_of(p, "nth", -1);
      c->p2p[c->p2p_count].count = (long long)num_of(p, "count", -1);
      c->p2p_count++;
    }
    c->wait_channel = c->wait_peer = -1;
    const cJSON *channels = cJSON_GetObjectItemCaseSensitive(e, "channels");
    cJSON_ArrayForEach(p, channels) {
      c->channels++;
      const cJSON *w = cJSON_GetObjectItemCaseSensitive(p, "waits_on");
      int send = strcmp(str_of(w, "direction", ""), "send") == 0;
      if (!cJSON_IsObject(w) || (c->wait_channel >= 0 && (send || !c->wait_send)))
        continue;
      c->wait_channel = (int)num_of(p, "channel", -1);
      c->wait_peer = (int)num_of(w, "peer", -1);
      c->wait_send = send;
      c->wait_transport = str_of(w, "transport", "");
      c->wait_done = (long long)num_of(p, send ? "sent" : "received", 0);
      c->wait_steps = (long long)num_of(p, send ? "send_steps" : "recv_steps", 0);
    }
    const cJSON *progress = cJSON_GetObjectItemCaseSensitive(e, "progress");
    if (cJSON_IsObject(progress)) {
      c->has_progress = 1;
      c->step = (int)num_of(progress, "step", 0);
      c->recv_from = (int)num_of(progress, "recv_from", -1);
      c->send_to = (int)num_of(progress, "send_to", -1);
    }
  }
}

/* Read one dump into its communicator's slot. 0, or -1 with a message. */
static int load(const char *path) {
  char *text = read_text(path);
  if (!text) {
    fprintf(stderr, "xcoll-fr: cannot read %s: %s\n", path, strerror(errno));
    return -1;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!root || strcmp(str_of(root, "format", ""), FORMAT_NAME) != 0) {
    fprintf(stderr, "xcoll-fr: %s is not a flight recorder dump (JSON with "
                    "\"format\":\"%s\")\n",
            path, FORMAT_NAME);
    cJSON_Delete(root);
    return -1;
  }
  int version = (int)num_of(root, "version", 0);
  if (version != FORMAT_VERSION) {
    fprintf(stderr, "xcoll-fr: %s has format version %d; this xcoll-fr reads "
                    "version %d\n",
            path, version, FORMAT_VERSION);
    cJSON_Delete(root);
    return -1;
  }
  const char *job = str_of(root, "job", "");
  long long comm_id = (long long)num_of(root, "comm_id", 0);
  int rank = (int)num_of(root, "rank", -1);
  int world = (int)num_of(root, "world_size", 0);
  if (world < 1 || rank < 0 || rank >= world || world > 1 << 20) {
    fprintf(stderr, "xcoll-fr: %s: rank %d of world_size %d is not valid\n",
            path, rank, world);
    cJSON_Delete(root);
    return -1;
  }
  comm_dumps *c = NULL;
  for (int i = 0; i < ncomms; i++)
    if (comms[i].comm_id == comm_id && strcmp(comms[i].job, job) == 0)
      c = &comms[i];
  if (!c) {
    comm_dumps *grown = realloc(comms, (size_t)(ncomms + 1) * sizeof *comms);
    if (!grown)
      return -1;
    comms = grown;
    c = &comms[ncomms++];
    memset(c, 0, sizeof *c);
    format(c->job, sizeof c->job, "%s", job);
    c->comm_id = comm_id;
    c->world_size = world;
    c->ranks = calloc((size_t)world, sizeof *c->ranks);
    if (!c->ranks)
      return -1;
  }
  if (world != c->world_size) {
    fprintf(stderr, "xcoll-fr: %s: world_size %d, but other dumps of "
                    "communicator %lld say %d\n",
            path, world, comm_id, c->world_size);
    cJSON_Delete(root);
    return -1;
  }
  rank_dump *r = &c->ranks[rank];
  double dumped = num_of(root, "dumped_us", 0);
  if (r->present && r->dumped_us >= dumped) { /* keep the later dump */
    cJSON_Delete(root);
    return 0;
  }
  if (r->present) {
    cJSON_Delete(r->root);
    free(r->calls);
    free(r->sends);
    free(r->recvs);
    memset(r, 0, sizeof *r);
  }
  r->root = root;
  r->present = 1;
  r->path = strdup(path);
  r->world_size = world;
  r->dumped_us = dumped;
  r->reason = str_of(root, "reason", "?");
  const cJSON *broken = cJSON_GetObjectItemCaseSensitive(root, "broken");
  if (cJSON_IsObject(broken)) {
    r->broken_status = str_of(broken, "status", "?");
    r->broken_message = str_of(broken, "message", "");
  }
  parse_calls(r, cJSON_GetObjectItemCaseSensitive(root, "entries"));
  r->sends = calloc((size_t)world, sizeof *r->sends);
  r->recvs = calloc((size_t)world, sizeof *r->recvs);
  const cJSON *p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(root, "p2p_counts")) {
    int peer = (int)num_of(p, "peer", -1);
    if (peer >= 0 && peer < world && r->sends && r->recvs) {
      r->sends[peer] = (long long)num_of(p, "sends", 0);
      r->recvs[peer] = (long long)num_of(p, "recvs", 0);
    }
  }
  return 0;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A file, or every xcoll_fr.*.json in a directory. Returns dumps read. */
static int load_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "xcoll-fr: %s: %s\n", path, strerror(errno));
    return 0;
  }
  if (!S_ISDIR(st.st_mode))
    return load(path) == 0;
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "xcoll-fr: %s: %s\n", path, strerror(errno));
    return 0;
  }
  int read = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "xcoll_fr.", 9) != 0 || !ends_with(e->d_name, ".json"))
      continue;
    char file[4096];
    format(file, sizeof file, "%s/%s", path, e->d_name);
    read += load(file) == 0;
  }
  closedir(d);
  return read;
}

/* ---- analysis ---- */

static int is_p2p(const call *c) {
  return strcmp(c->name, "send") == 0 || strcmp(c->name, "recv") == 0 ||
         strcmp(c->name, "group") == 0;
}
static int is_done(const call *c) { return strcmp(c->state, "completed") == 0; }

/* "allreduce seq 7 (1024 float32 sum)" */
static void describe(const call *c, char *out, size_t n) {
  if (strcmp(c->name, "send") == 0 || strcmp(c->name, "recv") == 0)
    format(out, n, "%s %s rank %d (%lld %s, before seq %lld)", c->name,
             strcmp(c->name, "send") == 0 ? "to" : "from", c->peer, c->count,
             c->dtype, c->seq);
  else if (strcmp(c->name, "group") == 0)
    format(out, n, "group of %d sends/recvs (before seq %lld)", c->p2p_count,
             c->seq);
  else if (c->count >= 0)
    format(out, n, "%s seq %lld (%lld %s%s%s%s)", c->name, c->seq, c->count,
             c->dtype, c->op[0] ? " " : "", c->op,
             c->root >= 0 ? ", root" : "");
  else
    format(out, n, "%s seq %lld", c->name, c->seq);
  if (c->root >= 0 && c->count >= 0) {
    size_t used = strlen(out);
    if (used > 0 && out[used - 1] == ')' && used + 8 < n)
      format(out + used - 1, n - used + 1, " %d)", c->root);
  }
}

static int same_call(const call *a, const call *b) {
  return strcmp(a->name, b->name) == 0 && a->count == b->count &&
         strcmp(a->dtype, b->dtype) == 0 && strcmp(a->op, b->op) == 0 &&
         a->root == b->root;
}

static const call *collective_at(const rank_dump *r, long long seq) {
  for (int i = 0; i < r->ncalls; i++)
    if (!is_p2p(&r->calls[i]) && r->calls[i].seq == seq)
      return &r->calls[i];
  return NULL;
}

/* The first call of r that is not completed, or NULL. */
static const call *stuck_call(const rank_dump *r) {
  for (int i = 0; i < r->ncalls; i++)
    if (!is_done(&r->calls[i]))
      return &r->calls[i];
  return NULL;
}

static const call *last_call(const rank_dump *r) {
  return r->ncalls ? &r->calls[r->ncalls - 1] : NULL;
}

/* The peer a stuck call waits on: the last receive's peer (a send
 * completes into socket buffers), else the last send's, else (nccl_like)
 * the peer of the channel it waits on, else the send/recv's peer; -1 when
 * unknown. */
static int waits_on(const call *c) {
  if (c == NULL)
    return -1;
  if (c->wait_peer >= 0)
    return c->wait_peer;
  if (c->has_progress && c->recv_from >= 0)
    return c->recv_from;
  if (c->has_progress && c->send_to >= 0)
    return c->send_to;
  return c->peer;
}

static void rank_list(const int *ranks, int n, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < n && used + 12 < size; i++)
    used += (size_t)format(out + used, size - used, "%s%d", i ? "," : "",
                             ranks[i]);
}

typedef struct verdict {
  const char *kind; /* desync, not_entered, unmatched_p2p, no_dump,
                       wait_chain, none */
  int culprits[64];
  int nculprits;
  char call[256];
  char text[1024];
} verdict;

static void add_culprit(verdict *v, int rank) {
  for (int i = 0; i < v->nculprits; i++)
    if (v->culprits[i] == rank)
      return;
  if (v->nculprits < 64)
    v->culprits[v->nculprits++] = rank;
}

/* 1: found the first seq at which the ranks' collectives differ. */
static int find_desync(const comm_dumps *c, verdict *v) {
  long long lo = -1, hi = -1;
  for (int r = 0; r < c->world_size; r++)
    for (int i = 0; i < c->ranks[r].ncalls; i++) {
      const call *k = &c->ranks[r].calls[i];
      if (is_p2p(k))
        continue;
      if (lo < 0 || k->seq < lo)
        lo = k->seq;
      if (k->seq > hi)
        hi = k->seq;
    }
  for (long long seq = lo; seq >= 0 && seq <= hi; seq++) {
    /* group the ranks that have a call at seq by what they called */
    const call *kinds[64];
    int members[64][64], nmembers[64], nkinds = 0;
    for (int r = 0; r < c->world_size; r++) {
      const call *k = collective_at(&c->ranks[r], seq);
      if (!k)
        continue;
      int j = 0;
      while (j < nkinds && !same_call(kinds[j], k))
        j++;
      if (j == nkinds) {
        if (nkinds == 64)
          continue;
        kinds[nkinds] = k;
        nmembers[nkinds++] = 0;
      }
      if (nmembers[j] < 64)
        members[j][nmembers[j]++] = r;
    }
    if (nkinds < 2)
      continue;
    int major = 0, tie = 0;
    for (int j = 1; j < nkinds; j++)
      if (nmembers[j] > nmembers[major])
        major = j, tie = 0;
      else if (nmembers[j] == nmembers[major])
        tie = 1;
    v->kind = "desync";
    char what[256], theirs[256], who[256], others[256];
    describe(kinds[major], theirs, sizeof theirs);
    rank_list(members[major], nmembers[major], others, sizeof others);
    size_t used = (size_t)format(v->text, sizeof v->text,
                                   "the ranks disagree at seq %lld:", seq);
    for (int j = 0; j < nkinds; j++) {
      describe(kinds[j], what, sizeof what);
      rank_list(members[j], nmembers[j], who, sizeof who);
      used += (size_t)format(v->text + used, sizeof v->text - used,
                               "%s rank%s %s called %s", j ? ";" : "",
                               nmembers[j] > 1 ? "s" : "", who, what);
      if (used >= sizeof v->text)
        break;
      if (!tie && j != major)
        for (int m = 0; m < nmembers[j]; m++)
          add_culprit(v, members[j][m]);
    }
    if (tie)
      for (int j = 0; j < nkinds; j++)
        for (int m = 0; m < nmembers[j]; m++)
          add_culprit(v, members[j][m]);
    const call *bad = tie ? kinds[0] : kinds[major == 0 ? 1 : 0];
    describe(bad, v->call, sizeof v->call);
    (void)theirs;
    (void)others;
    return 1;
  }
  return 0;
}

/* A stuck send or recv of rank r: the peer that has not posted the
 * matching call. 1 when found. */
static int find_unmatched(const comm_dumps *c, int r, const call *k,
                          verdict *v) {
  for (int i = 0; i < k->p2p_count; i++) {
    int peer = k->p2p[i].peer;
    if (peer < 0 || peer >= c->world_size || !c->ranks[peer].present)
      continue;
    const rank_dump *p = &c->ranks[peer];
    int sending = strcmp(k->p2p[i].name, "recv") == 0; /* peer must send */
    long long posted = sending ? p->sends[r] : p->recvs[r];
    if (posted > k->p2p[i].nth)
      continue;
    v->kind = "unmatched_p2p";
    add_culprit(v, peer);
    format(v->call, sizeof v->call, "%s %s rank %d", sending ? "send" : "recv",
             sending ? "to" : "from", r);
    format(v->text, sizeof v->text,
             "rank %d never posted the %s %s rank %d (its #%lld) that rank "
             "%d's %s %s rank %d waits for; it has posted %lld",
             peer, sending ? "send" : "recv", sending ? "to" : "from", r,
             k->p2p[i].nth + 1, r, k->p2p[i].name, sending ? "from" : "to",
             peer, posted);
    return 1;
  }
  return 0;
}

static void analyze(const comm_dumps *c, verdict *v) {
  memset(v, 0, sizeof *v);
  v->kind = "none";
  if (find_desync(c, v))
    return;
  /* The earliest stuck collective among the ranks. */
  const call *stuck = NULL;
  int stuck_rank = -1;
  for (int r = 0; r < c->world_size; r++) {
    const call *k = c->ranks[r].present ? stuck_call(&c->ranks[r]) : NULL;
    if (k && (stuck == NULL || k->seq < stuck->seq ||
              (k->seq == stuck->seq && is_p2p(k) && !is_p2p(stuck)))) {
      stuck = k;
      stuck_rank = r;
    }
  }
  if (!stuck) {
    format(v->text, sizeof v->text, "no call is in flight or failed");
    return;
  }
  char what[256];
  describe(stuck, what, sizeof what);
  /* A send or recv: does the peer have the matching call? */
  for (int r = 0; r < c->world_size; r++) {
    const call *k = c->ranks[r].present ? stuck_call(&c->ranks[r]) : NULL;
    if (k && is_p2p(k) && find_unmatched(c, r, k, v))
      return;
  }
  /* A collective: the ranks that never entered it. */
  if (!is_p2p(stuck)) {
    int in[64], nin = 0;
    for (int r = 0; r < c->world_size; r++) {
      const rank_dump *d = &c->ranks[r];
      if (!d->present)
        continue;
      if (collective_at(d, stuck->seq)) {
        if (nin < 64)
          in[nin++] = r;
        continue;
      }
      const call *last = last_call(d);
      if (last && last->seq > stuck->seq)
        continue; /* its ring no longer holds seq */
      add_culprit(v, r);
    }
    if (v->nculprits > 0) {
      char who[256], inside[256], lastcall[256] = "none";
      rank_list(v->culprits, v->nculprits, who, sizeof who);
      rank_list(in, nin, inside, sizeof inside);
      const call *last = last_call(&c->ranks[v->culprits[0]]);
      if (last)
        describe(last, lastcall, sizeof lastcall);
      v->kind = "not_entered";
      format(v->call, sizeof v->call, "%s", what);
      format(v->text, sizeof v->text,
               "rank%s %s never entered %s, which rank%s %s did (rank %d's "
               "last call: %s, %s)",
               v->nculprits > 1 ? "s" : "", who, what, nin > 1 ? "s" : "",
               inside, v->culprits[0], lastcall,
               last ? last->state : "none");
      return;
    }
  }
  /* Follow the waits from the stuck rank to where they end: a rank that
   * left no dump, or one that waits on nobody. */
  int r = stuck_rank, hops = 0;
  int seen[64] = {0};
  while (hops++ < c->world_size) {
    const rank_dump *d = &c->ranks[r];
    if (!d->present) {
      v->kind = "no_dump";
      add_culprit(v, r);
      format(v->call, sizeof v->call, "%s", what);
      if (is_p2p(stuck) && stuck->peer == r)
        format(v->call, sizeof v->call, "the %s %s rank %d that its %s waits for",
                 strcmp(stuck->name, "recv") == 0 ? "send" : "recv",
                 strcmp(stuck->name, "recv") == 0 ? "to" : "from", stuck_rank,
                 stuck->name);
      format(v->text, sizeof v->text,
               "rank %d left no dump (stopped, killed, or without a SIGUSR1 "
               "handler) while ranks wait on it in %s",
               r, what);
      return;
    }
    int next = waits_on(stuck_call(d));
    if (next < 0 || next >= c->world_size || (r < 64 && seen[r]))
      break;
    if (r < 64)
      seen[r] = 1;
    r = next;
  }
  v->kind = "wait_chain";
  add_culprit(v, r);
  format(v->call, sizeof v->call, "%s", what);
  format(v->text, sizeof v->text,
           "every rank entered %s; the waits lead to rank %d", what, r);
}

/* ---- output ---- */

static void print_text(const comm_dumps *c, const verdict *v, int last_n) {
  int missing[64], nmissing = 0, have = 0;
  for (int r = 0; r < c->world_size; r++) {
    if (c->ranks[r].present)
      have++;
    else if (nmissing < 64)
      missing[nmissing++] = r;
  }
  char list[256];
  rank_list(missing, nmissing, list, sizeof list);
  printf("xcoll-fr: job %s, communicator %lld: %d rank%s, %d dump%s",
         c->job, c->comm_id, c->world_size, c->world_size > 1 ? "s" : "",
         have, have > 1 ? "s" : "");
  if (nmissing)
    printf(" (none from rank%s %s)", nmissing > 1 ? "s" : "", list);
  printf("\n");
  /* The first failure in time (monotonic clocks of one host compare). */
  int first = -1;
  double first_us = 0;
  for (int r = 0; r < c->world_size; r++) {
    const rank_dump *d = &c->ranks[r];
    for (int i = 0; d->present && i < d->ncalls; i++) {
      const call *k = &d->calls[i];
      if (strcmp(k->state, "failed") == 0 && k->ended_us > 0 &&
          (first < 0 || k->ended_us < first_us)) {
        first = r;
        first_us = k->ended_us;
      }
    }
  }
  if (first >= 0 && c->ranks[first].broken_status)
    printf("first failure: rank %d, %s: %s\n", first,
           c->ranks[first].broken_status, c->ranks[first].broken_message);
  if (v->nculprits > 0) {
    char who[256];
    rank_list(v->culprits, v->nculprits, who, sizeof who);
    printf("culprit: rank%s %s in %s\n", v->nculprits > 1 ? "s" : "", who,
           v->call);
  }
  printf("verdict (%s): %s\n", v->kind, v->text);
  printf("stuck:\n");
  for (int r = 0; r < c->world_size; r++) {
    const rank_dump *d = &c->ranks[r];
    if (!d->present) {
      printf("  rank %-3d no dump\n", r);
      continue;
    }
    const call *k = stuck_call(d);
    char what[256];
    if (!k) {
      const call *last = last_call(d);
      if (last)
        describe(last, what, sizeof what);
      printf("  rank %-3d idle: last call %s\n", r, last ? what : "none");
      continue;
    }
    describe(k, what, sizeof what);
    printf("  rank %-3d %s: %s %s", r, what, k->state, k->status);
    int peer = waits_on(k);
    if (k->has_progress && k->step >= 0xfffff0) /* core/group.c's steps */
      printf(", %s, waits on recv from rank %d / send to rank %d",
             k->step == 0xfffff0 ? "exchanging fingerprints" : "moving data",
             k->recv_from, k->send_to);
    else if (k->has_progress)
      printf(", step %d, waits on recv from rank %d / send to rank %d", k->step,
             k->recv_from, k->send_to);
    else if (k->wait_peer >= 0)
      printf(", channel %d waits on %s rank %d (%s), %lld of %lld steps %s "
             "(%d channel%s)",
             k->wait_channel, k->wait_send ? "send to" : "recv from",
             k->wait_peer, k->wait_transport, k->wait_done, k->wait_steps,
             k->wait_send ? "sent" : "received", k->channels,
             k->channels > 1 ? "s" : "");
    else if (peer >= 0)
      printf(", waits on rank %d", peer);
    printf("\n");
  }
  printf("last calls:\n");
  for (int r = 0; r < c->world_size; r++) {
    const rank_dump *d = &c->ranks[r];
    if (!d->present)
      continue;
    printf("  rank %d (%s dump)\n", r, d->reason);
    printf("    %6s %-15s %10s %-9s %-6s %-10s %-14s %-10s\n", "seq", "call",
           "count", "dtype", "op", "state", "status", "algorithm");
    int from = d->ncalls > last_n ? d->ncalls - last_n : 0;
    for (int i = from; i < d->ncalls; i++) {
      const call *k = &d->calls[i];
      char count[32] = "";
      if (k->count >= 0)
        format(count, sizeof count, "%lld", k->count);
      char name[32];
      if (k->peer >= 0)
        format(name, sizeof name, "%s %s%d", k->name,
                 strcmp(k->name, "send") == 0 ? "->" : "<-", k->peer);
      else
        format(name, sizeof name, "%s", k->name);
      printf("    %6lld %-15s %10s %-9s %-6s %-10s %-14s %-10s\n", k->seq, name,
             count, k->dtype, k->op, k->state, k->status, k->algorithm);
    }
  }
}

static cJSON *json_of(const comm_dumps *c, const verdict *v, int last_n) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "job", c->job);
  cJSON_AddNumberToObject(o, "comm_id", (double)c->comm_id);
  cJSON_AddNumberToObject(o, "world_size", c->world_size);
  cJSON *missing = cJSON_AddArrayToObject(o, "missing");
  for (int r = 0; r < c->world_size; r++)
    if (!c->ranks[r].present)
      cJSON_AddItemToArray(missing, cJSON_CreateNumber(r));
  cJSON *jv = cJSON_AddObjectToObject(o, "verdict");
  cJSON_AddStringToObject(jv, "kind", v->kind);
  cJSON *culprits = cJSON_AddArrayToObject(jv, "culprits");
  for (int i = 0; i < v->nculprits; i++)
    cJSON_AddItemToArray(culprits, cJSON_CreateNumber(v->culprits[i]));
  cJSON_AddStringToObject(jv, "call", v->call);
  cJSON_AddStringToObject(jv, "text", v->text);
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int r = 0; r < c->world_size; r++) {
    const rank_dump *d = &c->ranks[r];
    cJSON *jr = cJSON_CreateObject();
    cJSON_AddNumberToObject(jr, "rank", r);
    cJSON_AddBoolToObject(jr, "dump", d->present);
    if (d->present) {
      cJSON_AddStringToObject(jr, "reason", d->reason);
      if (d->broken_status) {
        cJSON_AddStringToObject(jr, "broken", d->broken_status);
        cJSON_AddStringToObject(jr, "message", d->broken_message);
      }
      const call *k = stuck_call(d);
      if (k) {
        cJSON *js = cJSON_AddObjectToObject(jr, "stuck");
        cJSON_AddStringToObject(js, "call", k->name);
        cJSON_AddNumberToObject(js, "seq", (double)k->seq);
        cJSON_AddStringToObject(js, "state", k->state);
        cJSON_AddStringToObject(js, "status", k->status);
        cJSON_AddNumberToObject(js, "waits_on", waits_on(k));
        if (k->wait_channel >= 0) {
          cJSON_AddNumberToObject(js, "channel", k->wait_channel);
          cJSON_AddStringToObject(js, "direction",
                                  k->wait_send ? "send" : "recv");
        }
      }
      cJSON *last = cJSON_AddArrayToObject(jr, "last_calls");
      int from = d->ncalls > last_n ? d->ncalls - last_n : 0;
      cJSON *entries =
          cJSON_GetObjectItemCaseSensitive(d->root, "entries");
      for (int i = from; i < d->ncalls; i++)
        cJSON_AddItemToArray(
            last, cJSON_Duplicate(cJSON_GetArrayItem(entries, i), 1));
    }
    cJSON_AddItemToArray(ranks, jr);
  }
  return o;
}

static void usage(FILE *to) {
  fputs("usage: xcoll-fr [--json] [--last N] DIR|FILE...\n"
        "Read the flight recorder dumps of a job (xcoll_fr.c<comm>.r<rank>.json,\n"
        "docs/flight-recorder.md) and name the rank and call that hold it up.\n"
        "  --json     one JSON object: {\"communicators\": [...]}\n"
        "  --last N   calls per rank in the table (default 6)\n",
        to);
}

/* A bad command line: one line saying what was wrong, one saying where
 * the usage is; exit status 2. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("xcoll-fr: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nsee 'xcoll-fr --help'\n", stderr);
  return 2;
}

int main(int argc, char **argv) {
  int as_json = 0, last_n = 6, read = 0, paths = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--version") == 0) {
      printf("xcoll-fr (xcoll) %s\n", XCOLL_PROJECT_VERSION);
      return 0;
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = 1;
    } else if (strcmp(argv[i], "--last") == 0) {
      char *end = NULL;
      long value = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || value < 1 ||
          value > 1000000)
        return usage_error("--last wants a number of calls >= 1, got '%s'",
                           i + 1 < argc ? argv[i + 1] : "");
      last_n = (int)value;
      i++;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-') {
      return usage_error("unknown option '%s'", argv[i]);
    } else {
      paths++;
      read += load_path(argv[i]);
    }
  }
  if (paths == 0)
    return usage_error("no dump to read: give the dump directory "
                       "(XCOLL_FLIGHT_RECORDER_DIR) or its xcoll_fr.*.json "
                       "files");
  if (read == 0) {
    fprintf(stderr, "xcoll-fr: no flight recorder dump could be read\n");
    return 1;
  }
  cJSON *out = as_json ? cJSON_CreateObject() : NULL;
  cJSON *list = as_json ? cJSON_AddArrayToObject(out, "communicators") : NULL;
  for (int i = 0; i < ncomms; i++) {
    verdict v;
    analyze(&comms[i], &v);
    if (as_json)
      cJSON_AddItemToArray(list, json_of(&comms[i], &v, last_n));
    else
      print_text(&comms[i], &v, last_n);
  }
  if (as_json) {
    char *text = cJSON_Print(out);
    if (text)
      printf("%s\n", text);
    free(text);
    cJSON_Delete(out);
  }
  return 0;
}
