package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"
)

// shutdownTimeout bounds how long Serve waits for queries in flight when it stops.
const shutdownTimeout = 5 * time.Second

// listener is one dns.Server (UDP or TCP on one address) and what became of it.
type listener struct {
	srv     *dns.Server
	started chan struct{}
	exited  chan struct{}
	err     error
}

// Serve answers with h on UDP and TCP on each of addrs (the node agent passes its proxy
// addresses). It binds every socket first, so that a port taken fails it at
// once, calls ready (if not nil) when all of them serve, and returns when ctx ends (nil) or
// when a listener fails (its error), stopping the others either way.
func Serve(ctx context.Context, h dns.Handler, addrs []string, ready func()) error {
	if len(addrs) == 0 {
		return errors.New("no addresses to listen on")
	}
	var ls []*listener
	closeAll := func() {
		for _, l := range ls {
			l.closeSocket()
		}
	}
	for _, addr := range addrs {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("listening on udp %s: %w", addr, err)
		}
		ls = append(ls, newListener(&dns.Server{PacketConn: pc, Handler: h, UDPSize: dns.DefaultMsgSize}))
		tl, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("listening on tcp %s: %w", addr, err)
		}
		ls = append(ls, newListener(&dns.Server{Listener: tl, Handler: h}))
	}

	anyExited := make(chan struct{}, len(ls))
	for _, l := range ls {
		go func() {
			l.err = l.srv.ActivateAndServe()
			close(l.exited)
			anyExited <- struct{}{}
		}()
	}
	for _, l := range ls {
		select {
		case <-l.started:
		case <-l.exited:
			return stopAll(ls)
		}
	}
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
	case <-anyExited:
	}
	return stopAll(ls)
}

func newListener(srv *dns.Server) *listener {
	l := &listener{srv: srv, started: make(chan struct{}), exited: make(chan struct{})}
	srv.NotifyStartedFunc = func() { close(l.started) }
	return l
}

func (l *listener) closeSocket() {
	if l.srv.PacketConn != nil {
		l.srv.PacketConn.Close()
	}
	if l.srv.Listener != nil {
		l.srv.Listener.Close()
	}
}

// stopAll shuts every listener down and returns the first error one of them failed with. A
// dns.Server can only be shut down once it has started, so each is waited for to start or
// fail first.
func stopAll(ls []*listener) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, l := range ls {
		select {
		case <-l.started:
			// A listener that has already failed answers "server not started".
			_ = l.srv.ShutdownContext(ctx)
		case <-l.exited:
			// It failed before it started, and did not close its socket.
			l.closeSocket()
		}
	}
	var err error
	for _, l := range ls {
		<-l.exited
		if err == nil && l.err != nil {
			err = fmt.Errorf("serving DNS: %w", l.err)
		}
	}
	return err
}

// UpstreamsFromResolvConf reads the nameservers of a resolv.conf (the pod's: cluster DNS) as
// addr:53.
func UpstreamsFromResolvConf(path string) ([]string, error) {
	c, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, err
	}
	if len(c.Servers) == 0 {
		return nil, fmt.Errorf("%s names no nameserver", path)
	}
	out := make([]string, 0, len(c.Servers))
	for _, s := range c.Servers {
		out = append(out, net.JoinHostPort(s, c.Port))
	}
	return out, nil
}
