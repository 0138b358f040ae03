package main

import (
	"context"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// controlServer is tapes.v1.ProducerControlService over a daemon.
type controlServer struct {
	tapesv1.UnimplementedProducerControlServiceServer
	d *daemon
}

func (s *controlServer) Status(context.Context, *tapesv1.StatusRequest) (*tapesv1.StatusResponse, error) {
	s.d.mu.Lock()
	final := s.d.final
	s.d.mu.Unlock()
	if final != nil {
		return final, nil
	}
	return s.d.status(), nil
}

func (s *controlServer) Pause(context.Context, *tapesv1.PauseRequest) (*tapesv1.PauseResponse, error) {
	if err := s.running("pause"); err != nil {
		return nil, err
	}
	s.d.setState(statePaused)
	s.d.log.Info("paused")
	return &tapesv1.PauseResponse{}, nil
}

func (s *controlServer) Resume(context.Context, *tapesv1.ResumeRequest) (*tapesv1.ResumeResponse, error) {
	if err := s.running("resume"); err != nil {
		return nil, err
	}
	s.d.setState(stateRunning)
	s.d.log.Info("resumed")
	return &tapesv1.ResumeResponse{}, nil
}

func (s *controlServer) SetRate(_ context.Context, req *tapesv1.SetRateRequest) (*tapesv1.SetRateResponse, error) {
	r := req.GetRecordsPerSecond()
	if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return nil, status.Errorf(codes.InvalidArgument, "records_per_second %v: want 0 (as fast as possible) or more", r)
	}
	s.d.setRate(r)
	s.d.log.Info("rate set", "records_per_second", r)
	return &tapesv1.SetRateResponse{}, nil
}

// Stop stops sending, waits until the records in flight are reported and
// the history is written, and answers with the final status.
func (s *controlServer) Stop(ctx context.Context, _ *tapesv1.StopRequest) (*tapesv1.StopResponse, error) {
	s.d.log.Info("stop requested through the control endpoint")
	s.d.requestStop()
	select {
	case <-s.d.finished:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return &tapesv1.StopResponse{Final: s.d.final}, nil
}

// running refuses Pause and Resume once the producer is stopping.
func (s *controlServer) running(op string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.d.state == stateStopping || s.d.state == stateDone {
		return status.Errorf(codes.FailedPrecondition, "cannot %s: the producer is %s", op, s.d.state)
	}
	return nil
}
