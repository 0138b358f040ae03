package main

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
	"github.com/tapes-dev/tapes/internal/launch"
	"github.com/tapes-dev/tapes/internal/netfault"
)

// controlServer is tapes.v1.ClusterControlService over the launcher of
// `cluster up`: process faults (kill, pause, resume, restart, stop), client
// processes (start) and link faults (set, heal).
type controlServer struct {
	tapesv1.UnimplementedClusterControlServiceServer
	c *launch.Cluster
	// binary finds producerd / consumerd (launch.FindBinary in `up`).
	binary func(name string) (string, error)
}

// grpcErr maps the launcher's errors to gRPC codes a caller can act on.
func grpcErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, launch.ErrUnknownProcess):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, launch.ErrNotRunning), errors.Is(err, launch.ErrNoLinks):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, launch.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (s *controlServer) info(name string) (*tapesv1.ProcessInfo, error) {
	st, err := s.c.ProcessStatus(name)
	if err != nil {
		return nil, grpcErr(err)
	}
	return &tapesv1.ProcessInfo{Name: st.Proc.Name, Kind: st.Proc.Kind, BrokerId: st.Proc.ID, Pid: int32(st.Proc.PID),
		State: st.State, LastExit: st.LastExit, Address: st.Proc.Address, Log: st.Proc.Log}, nil
}

func (s *controlServer) ClusterStatus(context.Context, *tapesv1.ClusterStatusRequest) (*tapesv1.ClusterStatusResponse, error) {
	resp := &tapesv1.ClusterStatusResponse{Dir: s.c.Dir()}
	for _, name := range s.c.Names() {
		pi, err := s.info(name)
		if err != nil {
			return nil, err
		}
		resp.Processes = append(resp.Processes, pi)
	}
	for _, l := range s.c.Links() {
		resp.Links = append(resp.Links, &tapesv1.LinkInfo{From: l.From, To: l.To, Mode: l.Mode.String(),
			DelayMs: int32(l.Delay / time.Millisecond), JitterMs: int32(l.Jitter / time.Millisecond)})
	}
	return resp, nil
}

func (s *controlServer) KillProcess(_ context.Context, req *tapesv1.KillProcessRequest) (*tapesv1.KillProcessResponse, error) {
	if err := s.c.Kill(req.Name); err != nil {
		return nil, grpcErr(err)
	}
	pi, err := s.info(req.Name)
	return &tapesv1.KillProcessResponse{Process: pi}, err
}

func (s *controlServer) PauseProcess(_ context.Context, req *tapesv1.PauseProcessRequest) (*tapesv1.PauseProcessResponse, error) {
	if req.ForMs < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "for_ms %d: want 0 (until resumed) or more", req.ForMs)
	}
	if err := s.c.Pause(req.Name); err != nil {
		return nil, grpcErr(err)
	}
	if req.ForMs > 0 {
		time.AfterFunc(time.Duration(req.ForMs)*time.Millisecond, func() { _ = s.c.Resume(req.Name) })
	}
	pi, err := s.info(req.Name)
	return &tapesv1.PauseProcessResponse{Process: pi}, err
}

func (s *controlServer) ResumeProcess(_ context.Context, req *tapesv1.ResumeProcessRequest) (*tapesv1.ResumeProcessResponse, error) {
	if err := s.c.Resume(req.Name); err != nil {
		return nil, grpcErr(err)
	}
	pi, err := s.info(req.Name)
	return &tapesv1.ResumeProcessResponse{Process: pi}, err
}

func (s *controlServer) RestartProcess(_ context.Context, req *tapesv1.RestartProcessRequest) (*tapesv1.RestartProcessResponse, error) {
	if err := s.c.Restart(req.Name); err != nil {
		return nil, grpcErr(err)
	}
	pi, err := s.info(req.Name)
	return &tapesv1.RestartProcessResponse{Process: pi}, err
}

func (s *controlServer) StopProcess(_ context.Context, req *tapesv1.StopProcessRequest) (*tapesv1.StopProcessResponse, error) {
	if err := s.c.Stop(req.Name); err != nil {
		return nil, grpcErr(err)
	}
	pi, err := s.info(req.Name)
	return &tapesv1.StopProcessResponse{Process: pi}, err
}

func (s *controlServer) StartProcess(_ context.Context, req *tapesv1.StartProcessRequest) (*tapesv1.StartProcessResponse, error) {
	if req.Kind == launch.KafkaKind {
		if len(req.Args) == 0 || !filepath.IsAbs(req.Args[0]) {
			return nil, status.Errorf(codes.InvalidArgument, "kind %s: args must start with the program's absolute path, got %q", req.Kind, req.Args)
		}
		if err := s.c.StartProcess(launch.ProcessSpec{Name: req.Name, Kind: req.Kind, Path: req.Args[0], Args: req.Args[1:]}); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		pi, err := s.info(req.Name)
		return &tapesv1.StartProcessResponse{Process: pi}, err
	}
	bin := map[string]string{"producer": "producerd", "consumer": "consumerd"}[req.Kind]
	if bin == "" {
		return nil, status.Errorf(codes.InvalidArgument, "kind %q: want producer, consumer or %s", req.Kind, launch.KafkaKind)
	}
	if slices.Contains(req.Args, "--dir") || slices.Contains(req.Args, "--bootstrap-server") {
		return nil, status.Errorf(codes.InvalidArgument, "args name the cluster themselves; the launcher adds --dir %s", s.c.Dir())
	}
	path, err := s.binary(bin)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	args := append([]string{"--dir", s.c.Dir(), "--name", req.Name}, req.Args...)
	if err := s.c.StartProcess(launch.ProcessSpec{Name: req.Name, Kind: req.Kind, Path: path, Args: args}); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	pi, err := s.info(req.Name)
	return &tapesv1.StartProcessResponse{Process: pi}, err
}

// SetLinks validates every change before applying any.
func (s *controlServer) SetLinks(_ context.Context, req *tapesv1.SetLinksRequest) (*tapesv1.SetLinksResponse, error) {
	modes := make([]netfault.Mode, len(req.Links))
	for i, l := range req.Links {
		m, err := netfault.ParseMode(l.Mode)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if l.DelayMs < 0 || l.JitterMs < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "link %s->%s: delay %d ms, jitter %d ms: cannot be negative", l.From, l.To, l.DelayMs, l.JitterMs)
		}
		modes[i] = m
	}
	known := map[[2]string]bool{}
	for _, l := range s.c.Links() {
		known[[2]string{l.From, l.To}] = true
	}
	for _, l := range req.Links {
		if !known[[2]string{l.From, l.To}] {
			return nil, status.Errorf(codes.NotFound, "no link %s->%s (links go from a process to a broker)", l.From, l.To)
		}
	}
	for i, l := range req.Links {
		if err := s.c.SetLink(l.From, l.To, modes[i], time.Duration(l.DelayMs)*time.Millisecond, time.Duration(l.JitterMs)*time.Millisecond); err != nil {
			return nil, grpcErr(err)
		}
	}
	return &tapesv1.SetLinksResponse{}, nil
}

func (s *controlServer) Heal(context.Context, *tapesv1.HealRequest) (*tapesv1.HealResponse, error) {
	s.c.Heal()
	return &tapesv1.HealResponse{}, nil
}

// StartBroker starts one more broker under the launcher (cluster brokers
// add). The caller checks the id against the metadata (registered,
// removed); the launcher refuses an id whose broker it already has.
func (s *controlServer) StartBroker(_ context.Context, req *tapesv1.StartBrokerRequest) (*tapesv1.StartBrokerResponse, error) {
	if req.BrokerId <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "broker id %d: want a positive integer", req.BrokerId)
	}
	p, err := s.c.AddBroker(req.BrokerId)
	switch {
	case errors.Is(err, launch.ErrExists):
		return nil, status.Error(codes.AlreadyExists, err.Error())
	case err != nil:
		return nil, grpcErr(err)
	}
	pi, err := s.info(p.Name)
	return &tapesv1.StartBrokerResponse{Process: pi}, err
}
