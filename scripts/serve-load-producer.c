/* librdkafka's producer for scripts/serve-load.py: N records of SIZE bytes to TOPIC at BROKER,
 * acks=all, no compression, batches of up to 16 KiB (batch.size), LINGER ms (linger.ms), at most
 * MAXQ records queued in the client. Prints one JSON line: payload MB/s from the first produce to the
 * last delivery report, and each record's latency from produce to its delivery report (client
 * queueing included), in microseconds.
 *
 *   cc -O2 -o serve-load-producer scripts/serve-load-producer.c -lrdkafka   (Debian: librdkafka-dev)
 *   ./serve-load-producer 127.0.0.1:9092 load 65536 4000 256 1
 */
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double *sent_at;
static double *latency;
static long delivered;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err) {
        fprintf(stderr, "delivery failed: %s\n", rd_kafka_err2str(m->err));
        exit(1);
    }
    intptr_t i = (intptr_t)m->_private;
    if (i >= 0) {
        latency[delivered++] = now_us() - sent_at[i];
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s=%s: %s\n", k, v, err);
        exit(2);
    }
}

static void produce(rd_kafka_t *rk, const char *topic, void *buf, size_t size, intptr_t i) {
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_VALUE(buf, size),
                                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                                  RD_KAFKA_V_OPAQUE((void *)i), RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
            return;
        }
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "produce: %s\n", rd_kafka_err2str(e));
            exit(1);
        }
        rd_kafka_poll(rk, 1);
    }
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s BROKER TOPIC RECORDS SIZE MAXQ LINGER\n", argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    long n = atol(argv[3]);
    size_t size = (size_t)atol(argv[4]);
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", argv[1]);
    set(conf, "acks", "all");
    set(conf, "compression.type", "none");
    set(conf, "batch.size", "16384");
    set(conf, "linger.ms", argv[6]);
    set(conf, "queue.buffering.max.messages", argv[5]);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    char *buf = malloc(size);
    sent_at = malloc(sizeof(double) * n);
    latency = malloc(sizeof(double) * n);
    for (size_t i = 0; i < size; i++) {
        buf[i] = (char)('a' + i % 26);
    }
    /* The topic is made on first use (Metadata) and the connection opened. */
    produce(rk, topic, buf, 8, -1);
    rd_kafka_flush(rk, 30000);
    double start = now_us();
    for (long i = 0; i < n; i++) {
        sent_at[i] = now_us();
        produce(rk, topic, buf, size, i);
        rd_kafka_poll(rk, 0);
    }
    if (rd_kafka_flush(rk, 120000) != RD_KAFKA_RESP_ERR_NO_ERROR || delivered != n) {
        fprintf(stderr, "%ld of %ld delivered\n", delivered, n);
        return 1;
    }
    double seconds = (now_us() - start) / 1e6;
    qsort(latency, n, sizeof(double), cmp);
    printf("{\"mb_per_s\": %.1f, \"p50_us\": %.0f, \"p99_us\": %.0f, \"p999_us\": %.0f, \"records\": %ld}\n",
           n * (double)size / seconds / 1e6, latency[n / 2], latency[(long)(n * 0.99)],
           latency[(long)(n * 0.999)], n);
    rd_kafka_destroy(rk);
    return 0;
}
