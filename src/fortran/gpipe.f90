! Fortran 2008 bindings of the gpipe C API (include/gpipe/gpipe.h) through
! iso_c_binding. Arrays are passed as in C: inputs(features, n) in Fortran
! order is inputs (n, features) row-major in C, so a column per sample.
!
!   use gpipe
!   type(c_ptr) :: trainer
!   call check(gpipe_initialize_f())
!   call check(gpipe_create(deck_text, MPI_COMM_WORLD, trainer))
!   call check(gpipe_train_step(trainer, inputs, labels, n, loss))
!   call check(gpipe_train_step_targets_f(trainer, inputs, targets, n, loss))  ! regression
!   call check(gpipe_dimensions_f(trainer, features, classes, max_batch))
!   call check(gpipe_predict_f(trainer, inputs, n, logits))
!   call check(gpipe_save_checkpoint_f(trainer, "ckpt.h5"))
!   call check(gpipe_load_checkpoint_f(trainer, "ckpt.h5"))
!
! Every function returns the C status (GPIPE_OK = 0); gpipe_last_error_f()
! gives the message of a failure. "Collective" as in gpipe.h: every rank of
! the trainer's communicator calls it.
module gpipe
  use, intrinsic :: iso_c_binding
  implicit none
  private
  public :: gpipe_initialize_f, gpipe_finalize_f, gpipe_create, gpipe_destroy_f, &
            gpipe_train_step, gpipe_train_step_targets_f, gpipe_predict_f, gpipe_last_error_f, gpipe_set_total_steps_f, &
            GPIPE_OK, gpipe_dimensions_f, gpipe_parameter_count_f, gpipe_get_parameters_f, &
            gpipe_save_checkpoint_f, gpipe_load_checkpoint_f, gpipe_skipped_steps_f

  integer(c_int), parameter :: GPIPE_OK = 0

  interface
    function c_initialize(argc, argv) bind(C, name="gpipe_initialize") result(status)
      import :: c_int, c_ptr
      type(c_ptr), value :: argc, argv
      integer(c_int) :: status
    end function
    function c_finalize() bind(C, name="gpipe_finalize") result(status)
      import :: c_int
      integer(c_int) :: status
    end function
    function c_create(deck, comm, out) bind(C, name="gpipe_create_from_string_f") result(status)
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: deck
      integer(c_int), value :: comm
      type(c_ptr), intent(out) :: out
      integer(c_int) :: status
    end function
    function c_destroy(trainer) bind(C, name="gpipe_destroy") result(status)
      import :: c_int, c_ptr
      type(c_ptr), value :: trainer
      integer(c_int) :: status
    end function
    function c_train_step(trainer, inputs, labels, n, loss) bind(C, name="gpipe_train_step") result(status)
      import :: c_int, c_ptr, c_float, c_int32_t, c_int64_t, c_double
      type(c_ptr), value :: trainer
      real(c_float), dimension(*), intent(in) :: inputs
      integer(c_int32_t), dimension(*), intent(in) :: labels
      integer(c_int64_t), value :: n
      real(c_double), intent(out) :: loss
      integer(c_int) :: status
    end function
    function c_train_step_targets(trainer, inputs, targets, n, loss) &
        bind(C, name="gpipe_train_step_targets") result(status)
      import :: c_int, c_ptr, c_float, c_int64_t, c_double
      type(c_ptr), value :: trainer
      real(c_float), dimension(*), intent(in) :: inputs
      real(c_float), dimension(*), intent(in) :: targets
      integer(c_int64_t), value :: n
      real(c_double), intent(out) :: loss
      integer(c_int) :: status
    end function
    function c_predict(trainer, inputs, n, logits) bind(C, name="gpipe_predict") result(status)
      import :: c_int, c_ptr, c_float, c_int64_t
      type(c_ptr), value :: trainer
      real(c_float), dimension(*), intent(in) :: inputs
      integer(c_int64_t), value :: n
      real(c_float), dimension(*), intent(out) :: logits
      integer(c_int) :: status
    end function
    function c_set_total_steps(trainer, total) bind(C, name="gpipe_set_total_steps") result(status)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t), value :: total
      integer(c_int) :: status
    end function
    function c_dimensions(trainer, features, classes, max_batch) bind(C, name="gpipe_dimensions") &
        result(status)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t), intent(out) :: features, classes, max_batch
      integer(c_int) :: status
    end function
    function c_parameter_count(trainer, count) bind(C, name="gpipe_parameter_count") result(status)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t), intent(out) :: count
      integer(c_int) :: status
    end function
    function c_skipped_steps(trainer, skipped) bind(C, name="gpipe_skipped_steps") result(status)
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: trainer
      integer(c_int64_t), intent(out) :: skipped
      integer(c_int) :: status
    end function
    function c_get_parameters(trainer, values, count) bind(C, name="gpipe_get_parameters") result(status)
      import :: c_int, c_ptr, c_double, c_int64_t
      type(c_ptr), value :: trainer
      real(c_double), dimension(*), intent(out) :: values
      integer(c_int64_t), value :: count
      integer(c_int) :: status
    end function
    function c_save_checkpoint(trainer, path) bind(C, name="gpipe_save_checkpoint") result(status)
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: trainer
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int) :: status
    end function
    function c_load_checkpoint(trainer, path) bind(C, name="gpipe_load_checkpoint") result(status)
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: trainer
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int) :: status
    end function
    function c_last_error() bind(C, name="gpipe_last_error") result(message)
      import :: c_ptr
      type(c_ptr) :: message
    end function
    function c_strlen(s) bind(C, name="strlen") result(length)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: length
    end function
  end interface

contains

  !> Initializes Kokkos (MPI must be initialized). Returns a gpipe status.
  integer function gpipe_initialize_f() result(status)
    status = c_initialize(c_null_ptr, c_null_ptr)
  end function

  integer function gpipe_finalize_f() result(status)
    status = c_finalize()
  end function

  !> Creates a trainer from YAML deck text on a Fortran communicator (e.g. MPI_COMM_WORLD).
  integer function gpipe_create(deck, comm, trainer) result(status)
    character(len=*), intent(in) :: deck
    integer, intent(in) :: comm
    type(c_ptr), intent(out) :: trainer
    status = c_create(deck // c_null_char, int(comm, c_int), trainer)
  end function

  integer function gpipe_destroy_f(trainer) result(status)
    type(c_ptr), intent(in) :: trainer
    status = c_destroy(trainer)
  end function

  !> One training step: inputs(features, n), labels(n) in [0, classes); loss is the mean loss.
  integer function gpipe_train_step(trainer, inputs, labels, n, loss) result(status)
    type(c_ptr), intent(in) :: trainer
    real(c_float), intent(in) :: inputs(:, :)
    integer(c_int32_t), intent(in) :: labels(:)
    integer, intent(in) :: n
    real(c_double), intent(out) :: loss
    status = c_train_step(trainer, inputs, labels, int(n, c_int64_t), loss)
  end function

  !> One regression training step (deck model.loss mse, mae or huber): inputs(features, n),
  !> float targets(outputs, n); loss is the mean loss. Collective.
  integer function gpipe_train_step_targets_f(trainer, inputs, targets, n, loss) result(status)
    type(c_ptr), intent(in) :: trainer
    real(c_float), intent(in) :: inputs(:, :)
    real(c_float), intent(in) :: targets(:, :)
    integer, intent(in) :: n
    real(c_double), intent(out) :: loss
    status = c_train_step_targets(trainer, inputs, targets, int(n, c_int64_t), loss)
  end function

  !> Outputs(classes, n) of inputs(features, n): class logits, or regression values. After
  !> gpipe_load_checkpoint_f the checkpoint's normalization applies (gpipe.h, gpipe_predict):
  !> pass raw inputs, regression outputs come back in the targets' units. Collective.
  integer function gpipe_predict_f(trainer, inputs, n, logits) result(status)
    type(c_ptr), intent(in) :: trainer
    real(c_float), intent(in) :: inputs(:, :)
    integer, intent(in) :: n
    real(c_float), intent(out) :: logits(:, :)
    status = c_predict(trainer, inputs, int(n, c_int64_t), logits)
  end function

  !> The run's total training steps: the horizon of the learning-rate schedule (see gpipe.h).
  integer function gpipe_set_total_steps_f(trainer, total_steps) result(status)
    type(c_ptr), intent(in) :: trainer
    integer, intent(in) :: total_steps
    status = c_set_total_steps(trainer, int(total_steps, c_int64_t))
  end function

  !> Model dimensions: input features, classes (outputs), largest batch (training.batch_size).
  integer function gpipe_dimensions_f(trainer, features, classes, max_batch) result(status)
    type(c_ptr), intent(in) :: trainer
    integer(c_int64_t), intent(out) :: features, classes, max_batch
    status = c_dimensions(trainer, features, classes, max_batch)
  end function

  !> Number of parameters of the whole model. Collective.
  integer function gpipe_parameter_count_f(trainer, count) result(status)
    type(c_ptr), intent(in) :: trainer
    integer(c_int64_t), intent(out) :: count
    status = c_parameter_count(trainer, count)
  end function

  !> Training steps whose update was skipped so far (an fp16 gradient overflow, or
  !> training.nonfinite: skip_step): such a step returned GPIPE_OK but changed no weight.
  integer function gpipe_skipped_steps_f(trainer, skipped) result(status)
    type(c_ptr), intent(in) :: trainer
    integer(c_int64_t), intent(out) :: skipped
    status = c_skipped_steps(trainer, skipped)
  end function

  !> All parameters of the model in layer order (size(values) of them, which must be
  !> the parameter count), on every rank. Collective.
  integer function gpipe_get_parameters_f(trainer, values) result(status)
    type(c_ptr), intent(in) :: trainer
    real(c_double), intent(out) :: values(:)
    status = c_get_parameters(trainer, values, int(size(values), c_int64_t))
  end function

  !> Writes an HDF5 checkpoint to path (atomically; docs/file-formats.md). Collective.
  integer function gpipe_save_checkpoint_f(trainer, path) result(status)
    type(c_ptr), intent(in) :: trainer
    character(len=*), intent(in) :: path
    status = c_save_checkpoint(trainer, trim(path) // c_null_char)
  end function

  !> Restores parameters, optimizer state and step from a checkpoint written with any
  !> number of ranks. Collective.
  integer function gpipe_load_checkpoint_f(trainer, path) result(status)
    type(c_ptr), intent(in) :: trainer
    character(len=*), intent(in) :: path
    status = c_load_checkpoint(trainer, trim(path) // c_null_char)
  end function

  !> The message of the last failure.
  function gpipe_last_error_f() result(message)
    character(len=:), allocatable :: message
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, length
    p = c_last_error()
    length = int(c_strlen(p))
    call c_f_pointer(p, chars, [length])
    allocate(character(len=length) :: message)
    do i = 1, length
      message(i:i) = chars(i)
    end do
  end function

end module gpipe
