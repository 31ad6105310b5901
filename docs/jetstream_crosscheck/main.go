// JetStream cross-check with the official Go client (nats.go): the JetStream side of `tamto bench`
// (durable publish, consume+ack) without nats-py, against the same nats-server and configuration.
// Build offline with Debian's Go 1.19 and nats.go 1.22 (legacy JetStreamContext API, GOPATH mode):
// $ apt-get install -y golang-go golang-github-nats-io-go-nats-dev
// $ GO111MODULE=off GOPATH=/tmp/gopath:/usr/share/gocode go build -o /tmp/js-crosscheck docs/jetstream_crosscheck/main.go
// Run against a nats-server started like the harness's (JETSTREAM_CONFIG in bench/harness.py):
// $ /tmp/js-crosscheck -url nats://127.0.0.1:PORT -server-pid PID
// Defaults mirror the harness's full run: -sizes 100,1024,10240 -duration 5s -producers 2 -window 4000
// -consumers 2. Per size: file/R1/limits stream; publishers (own connection, PublishAsync, <= window
// unacked) for -duration; then consumers share one durable pull consumer (Fetch(1000), Ack each).
package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

const (
	fetchBatch   = 1000
	fetchWait    = 200 * time.Millisecond // the harness's receive timeout (min(0.2, left))
	flushTimeout = 30 * time.Second       // the harness's _FLUSH_TIMEOUT_S
	drainLimit   = 30 * time.Second       // the harness's drain_limit_s
	idle         = 1 * time.Second        // the harness's idle_s
	startDelay   = 200 * time.Millisecond // workers set up, then all start at one instant
)

type options struct {
	url       string
	sizes     []int
	duration  time.Duration
	producers int
	consumers int
	window    int
	serverPid int
}

// cpuSeconds is user+system CPU of a process from /proc (0 if unknown).
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// fields[0] is state (field 3); utime, stime are fields 14, 15.
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / 100.0 // USER_HZ
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// settle waits (<= 60 s) until nats-server uses < 0.15 core over 0.5 s, as the harness does.
func settle(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	t0 := time.Now()
	for time.Since(t0) < 60*time.Second {
		before := cpuSeconds(pid)
		time.Sleep(500 * time.Millisecond)
		if (cpuSeconds(pid)-before)/0.5 < 0.15 {
			break
		}
	}
	return time.Since(t0)
}

type cpuMeter struct {
	pid          int
	server, self float64
	wall         time.Time
}

func startMeter(pid int) cpuMeter {
	return cpuMeter{pid: pid, server: cpuSeconds(pid), self: selfCPU(), wall: time.Now()}
}

// CPU seconds used by nats-server and by this client process since startMeter.
func (m cpuMeter) used() (float64, float64) {
	return cpuSeconds(m.pid) - m.server, selfCPU() - m.self
}

// perK is CPU milliseconds per 1,000 messages.
func perK(cpu float64, n int64) float64 {
	if n == 0 {
		return 0
	}
	return cpu * 1e6 / float64(n)
}

func connect(url string) (*nats.Conn, error) {
	return nats.Connect(url, nats.MaxReconnects(0))
}

type pubResult struct {
	acked, errors int64
	started, last time.Time
	errMsgs       map[string]int
}

// publish: every publisher waits for the common start, publishes for the window with at most
// `window` unacked PublishAsync's, then waits for the tail; counted are acked publishes.
func publish(o options, subject string, size int, conns []*nats.Conn) (pubResult, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	res := pubResult{errMsgs: map[string]int{}}
	start := time.Now().Add(startDelay)
	end := start.Add(o.duration)
	var firstErr error
	for i := range conns {
		nc := conns[i]
		var errs int64
		js, err := nc.JetStream(
			nats.PublishAsyncMaxPending(o.window),
			nats.PublishAsyncErrHandler(func(_ nats.JetStream, _ *nats.Msg, err error) {
				atomic.AddInt64(&errs, 1)
				mu.Lock()
				res.errMsgs[err.Error()]++
				mu.Unlock()
			}),
		)
		if err != nil {
			return res, err
		}
		payload := make([]byte, size)
		_, _ = rand.Read(payload)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start))
			began := time.Now()
			var sent int64
			for time.Now().Before(end) {
				for j := 0; j < 256; j++ {
					if _, err := js.PublishAsync(subject, payload); err != nil {
						if strings.Contains(err.Error(), "stalled") {
							continue // window full for 200 ms: keep waiting, as nats-py blocks
						}
						mu.Lock()
						res.errMsgs["publish: "+err.Error()]++
						mu.Unlock()
						continue
					}
					sent++
				}
			}
			var last time.Time
			select {
			case <-js.PublishAsyncComplete():
				last = time.Now()
			case <-time.After(flushTimeout):
				mu.Lock()
				firstErr = errors.New("publish tail not acked within 30 s")
				mu.Unlock()
				last = time.Now()
			}
			e := atomic.LoadInt64(&errs)
			mu.Lock()
			res.acked += sent - e - int64(js.PublishAsyncPending())
			res.errors += e
			if res.started.IsZero() || began.Before(res.started) {
				res.started = began
			}
			if last.After(res.last) {
				res.last = last
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res, firstErr
}

type subResult struct {
	total         int64
	started, last time.Time
}

// consume: N consumers share one durable pull consumer; each fetches up to 1,000 (200 ms wait),
// acks every message, and stops once nothing came for 1 s (5 s before the first message).
func consume(o options, stream string, conns []*nats.Conn) (subResult, error) {
	subs := make([]*nats.Subscription, len(conns))
	for i, nc := range conns {
		js, err := nc.JetStream()
		if err != nil {
			return subResult{}, err
		}
		sub, err := js.PullSubscribe("", "bench", nats.Bind(stream, "bench"))
		if err != nil {
			return subResult{}, err
		}
		subs[i] = sub
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := time.Now().Add(startDelay)
	res := subResult{started: start}
	hardEnd := start.Add(drainLimit + idle)
	var firstErr error
	for i := range subs {
		sub, nc := subs[i], conns[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start))
			var total int64
			var last time.Time
			lastSeen := start
			for {
				now := time.Now()
				limit := idle
				if total == 0 {
					limit = 5 * time.Second
				}
				if !now.Before(hardEnd) || now.Sub(lastSeen) > limit {
					break
				}
				msgs, err := sub.Fetch(fetchBatch, nats.MaxWait(fetchWait))
				if err != nil && !errors.Is(err, nats.ErrTimeout) {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
				if len(msgs) == 0 {
					continue
				}
				lastSeen = time.Now()
				last = lastSeen
				total += int64(len(msgs))
				for _, m := range msgs {
					if err := m.Ack(); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}
			}
			_ = nc.FlushTimeout(flushTimeout)
			mu.Lock()
			res.total += total
			if last.After(res.last) {
				res.last = last
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res, firstErr
}

func connectN(url string, n int) ([]*nats.Conn, error) {
	conns := make([]*nats.Conn, n)
	for i := range conns {
		nc, err := connect(url)
		if err != nil {
			return nil, err
		}
		conns[i] = nc
	}
	return conns, nil
}

func closeAll(conns []*nats.Conn) {
	for _, nc := range conns {
		nc.Close()
	}
}

func runSize(o options, admin nats.JetStreamContext, size int) error {
	stream := fmt.Sprintf("gocheck-%d-%d", size, time.Now().UnixNano()%1_000_000)
	subject := "bench." + stream
	if _, err := admin.AddStream(&nats.StreamConfig{
		Name: stream, Subjects: []string{subject}, Storage: nats.FileStorage,
		Replicas: 1, Retention: nats.LimitsPolicy,
	}); err != nil {
		return err
	}
	defer func() { _ = admin.DeleteStream(stream) }()

	settledPub := settle(o.serverPid)
	pubConns, err := connectN(o.url, o.producers)
	if err != nil {
		return err
	}
	m := startMeter(o.serverPid)
	pr, perr := publish(o, subject, size, pubConns)
	pubServer, pubSelf := m.used()
	closeAll(pubConns)
	pubRate := float64(pr.acked) / pr.last.Sub(pr.started).Seconds()

	if _, err := admin.AddConsumer(stream, &nats.ConsumerConfig{
		Durable: "bench", AckPolicy: nats.AckExplicitPolicy, DeliverPolicy: nats.DeliverAllPolicy,
		MaxAckPending: 20_000, MaxWaiting: 512,
	}); err != nil {
		return err
	}
	settledSub := settle(o.serverPid)
	subConns, err := connectN(o.url, o.consumers)
	if err != nil {
		return err
	}
	m = startMeter(o.serverPid)
	sr, serr := consume(o, stream, subConns)
	subServer, subSelf := m.used()
	closeAll(subConns)
	subRate := 0.0
	if sr.total > 0 {
		subRate = float64(sr.total) / sr.last.Sub(sr.started).Seconds()
	}

	fmt.Printf("size=%d publish_msgs_s=%.0f published=%d pub_errors=%d consume_msgs_s=%.0f consumed=%d"+
		" | CPU ms/1k msgs pub: server %.0f client %.0f, consume: server %.0f client %.0f | settle %.1fs/%.1fs\n",
		size, pubRate, pr.acked, pr.errors, subRate, sr.total,
		perK(pubServer, pr.acked), perK(pubSelf, pr.acked), perK(subServer, sr.total), perK(subSelf, sr.total),
		settledPub.Seconds(), settledSub.Seconds())
	for msg, n := range pr.errMsgs {
		fmt.Printf("  size=%d publish error x%d: %s\n", size, n, msg)
	}
	if perr != nil {
		fmt.Printf("  size=%d publish: %v\n", size, perr)
	}
	if serr != nil {
		fmt.Printf("  size=%d consume: %v\n", size, serr)
	}
	return nil
}

func main() {
	var o options
	var sizes string
	flag.StringVar(&o.url, "url", "nats://127.0.0.1:4222", "nats-server URL")
	flag.StringVar(&sizes, "sizes", "100,1024,10240", "payload sizes in bytes")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "publish window")
	flag.IntVar(&o.producers, "producers", 2, "publisher goroutines, one connection each")
	flag.IntVar(&o.consumers, "consumers", 2, "consumer goroutines, one connection each")
	flag.IntVar(&o.window, "window", 4000, "max unacked async publishes per publisher")
	flag.IntVar(&o.serverPid, "server-pid", 0, "nats-server pid: settle before phases, report its CPU")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -sizes:", err)
			os.Exit(2)
		}
		o.sizes = append(o.sizes, n)
	}
	admin, err := connect(o.url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer admin.Close()
	ajs, err := admin.JetStream()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("nats.go %s, %d producers (window %d), %d consumers, %s windows\n",
		nats.Version, o.producers, o.window, o.consumers, o.duration)
	for _, size := range o.sizes {
		if err := runSize(o, ajs, size); err != nil {
			fmt.Fprintf(os.Stderr, "size %d: %v\n", size, err)
			os.Exit(1)
		}
	}
}
