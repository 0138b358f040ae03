package main

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tapesv1 "github.com/tapes-dev/tapes/internal/gen/tapes/v1"
)

// controlServer is tapes.v1.ConsumerControlService over a daemon.
type controlServer struct {
	tapesv1.UnimplementedConsumerControlServiceServer
	d *daemon
}

func (s *controlServer) ConsumerStatus(context.Context, *tapesv1.ConsumerStatusRequest) (*tapesv1.ConsumerStatusResponse, error) {
	s.d.mu.Lock()
	final := s.d.final
	s.d.mu.Unlock()
	if final != nil {
		return final, nil
	}
	return s.d.status(), nil
}

func (s *controlServer) PauseConsumer(context.Context, *tapesv1.PauseConsumerRequest) (*tapesv1.PauseConsumerResponse, error) {
	if err := s.running("pause"); err != nil {
		return nil, err
	}
	s.d.cons.Pause()
	s.d.log.Info("paused: fetching and processing stop, heartbeats go on")
	return &tapesv1.PauseConsumerResponse{}, nil
}

func (s *controlServer) ResumeConsumer(context.Context, *tapesv1.ResumeConsumerRequest) (*tapesv1.ResumeConsumerResponse, error) {
	if err := s.running("resume"); err != nil {
		return nil, err
	}
	s.d.cons.Resume()
	s.d.log.Info("resumed")
	return &tapesv1.ResumeConsumerResponse{}, nil
}

// CrashConsumer exits the process; the caller sees the connection drop
// (or this answer, if it wins the race).
func (s *controlServer) CrashConsumer(context.Context, *tapesv1.CrashConsumerRequest) (*tapesv1.CrashConsumerResponse, error) {
	go s.d.crash("crash requested through the control endpoint")
	return &tapesv1.CrashConsumerResponse{}, nil
}

// StopConsumer stops cleanly and answers with the final status.
func (s *controlServer) StopConsumer(ctx context.Context, _ *tapesv1.StopConsumerRequest) (*tapesv1.StopConsumerResponse, error) {
	s.d.log.Info("stop requested through the control endpoint")
	s.d.requestStop()
	select {
	case <-s.d.finished:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return &tapesv1.StopConsumerResponse{Final: s.d.final}, nil
}

func (s *controlServer) running(op string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.d.stopping {
		return status.Errorf(codes.FailedPrecondition, "cannot %s: the consumer is stopping", op)
	}
	return nil
}
